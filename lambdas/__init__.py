"""Control plane Lambdas: the REST API (``lambdas.api``), the reaper and the auditor.

Imports only :mod:`streamlease` and libraries, never ``worker`` or ``local``.
"""
