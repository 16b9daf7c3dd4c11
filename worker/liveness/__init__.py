"""Whether this worker and its fleet are alive, and what happens when one is not.

The event loop's own ticker (the health file the container check judges), this worker's sessions
over its life (join, open, replace, give up), the fleet watcher that proves dead sessions dead,
and the takeover and freeing of the streams such sessions leave behind (architecture §4a). The
loops here act through :mod:`worker.ownership`; nothing below imports them.
"""
