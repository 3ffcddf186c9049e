"""The model-based test of the store (DESIGN.md section 11: the test of
record for the store's semantics): random sequences of publishes with
options (a ttl among them), takes, settles, cancels, removals, pauses,
consumer deaths, the collector's steps and the clock moved forward, run on
the real Lua scripts of one real redis-server and checked after every step
against a plain Python model of where each message is and how it must end
(and, on the queue with lifecycle events, the end event its stream shows).

- model.py: Model, the reference: each message's place, attempts, options
  and predicted end, with no I/O.
- driver.py: Driver, the real store driven as consumers, producers, the
  collector and an operator would (through smqsup.store and the Producer),
  and Seen, where Redis holds each message now.
- checks.py: the invariants, the model against what Redis holds.
- machine.py: StoreMachine, hypothesis's RuleBasedStateMachine over both.
- runner.py: one redis-server for every example, the settings, run().
"""
