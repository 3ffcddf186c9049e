"""The collector: per queue, one process elected among all supervisors does the queue's housekeeping.

    lock (elected, renewed) ─▶ collector ─┬▶ reclaim the messages of dead consumers ─▶ store
                                          ├▶ promote delayed and scheduled messages ─▶ store
                                          ├▶ schedules: fire what is due ─▶ store
                                          └▶ stats: the per-second history ─▶ store

- collector.py: ``Collector``, the per-queue loop: election, reclaim of stale consumers, promotion.
- lock.py: the leader lock (SET NX PX with an owner token, renewed and released by compare-and-set).
- firing.py: firing schedules in rounds under a time budget, by the Redis clock.
- stats.py: the statistics history the collector writes and the snapshots views and the web read.
"""
