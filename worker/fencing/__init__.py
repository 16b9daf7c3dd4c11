"""Until when this worker may deliver: its session and the fences every holding checks.

The session (the worker item, renewed by a thread of its own, and the checkpoint slots each
renewal carries) and the fences, per-stream lease or shared session deadline, that stop delivery
the moment the proof lapses (architecture §4, §4a). The ground floor of the worker's folders:
the sinks and the stream path check a fence; nothing here imports them.
"""
