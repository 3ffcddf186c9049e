"""PublishOptions: the options of one publish call, as its caller gave them,
in one frozen value that travels from publish() through Publishing's checks
(which turn it into the script's units, scripts.Options) to the scripts.
A new publish option is a field here, its check in options.py, and its
script argument in scripts.Options: nothing else spells the options out.

    publish(queue, body, delay=30) ─▶ PublishOptions(delay=30)
        ─▶ Publishing.one / many (checked) ─▶ scripts.Options ─▶ publish_options.lua
"""

from __future__ import annotations

from typing import Any, NamedTuple, Optional


class PublishOptions(NamedTuple):
    """What a publish asks for, unchecked (Publishing checks it before a byte
    is sent: MessageError naming the option). A NamedTuple: frozen, and made
    in a fraction of a microsecond on the plain path. The Producer's
    docstring says what each option does."""

    delay: Any = None
    at: Any = None
    priority: Any = 0
    dedup_key: Any = None
    dedup_ttl: Any = None
    ttl: Any = None
    message_id: Any = None
    partition_key: Any = None
    result_ttl: Any = None
    dedup_until: Any = None
    group: Any = None
    depends_on: Optional[Any] = None
    on_parent_failure: Any = "fail"
    #: (not a publish() keyword) "HOME\tBID": each message is a member of that batch.
    link: str = ""

    def plain(self) -> bool:
        """Whether it asks for nothing the plain path (publish.lua) cannot do."""
        return self.delay is None and self.at is None and self.ttl is None and self.dedup_key is None \
            and type(self.priority) is int and self.priority == 0 and self.dedup_ttl is None \
            and self.dedup_until is None and not self.link and self.group is None


#: A publish without options.
PLAIN = PublishOptions()
