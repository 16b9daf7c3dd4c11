"""One stream's data path: from an upstream socket to the sink, and the state it reports.

Opening a connection safely (the URL policy after DNS) and classifying how it fails, the
transport seam and its WebSocket implementation, the reconnecting link, shared keepalive,
sequencing, delivery into the sink with its fence check, and each stream's progress and
connection state as written to its item. It knows nothing of leases beyond the fence it is
handed (:mod:`worker.fencing`).
"""
