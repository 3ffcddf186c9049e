"""The pre-fork supervisor: the arbiter (parent), its children, reload planning and systemd."""
