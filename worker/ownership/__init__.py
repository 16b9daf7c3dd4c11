"""Which streams this worker owns: taking them, holding them, renewing, shedding and releasing.

The one acquire path and the holder it starts (a held stream's lease, its link and delivery, and
how the holding ends), the holdings that count capacity, per-stream lease renewal
(architecture §4b), and the loops that find work or give it back: the command queue, the
reconciler, the rebalancer, the read of this worker's own leases, and the fair share they judge
by. The data path below a holder is :mod:`worker.stream`.
"""
