"""The parts of :class:`~streamlease.lease_store.LeaseStore`, one concern each: the item layout,
acquire, holding (renew, record, release), a dead session's streams, and the reads."""
