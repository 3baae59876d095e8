"""Exit codes of ``dledger audit`` (shared by the audit and its command line; see
``dledger.spark.audit_cli`` for what each means)."""

EXIT_OK = 0
EXIT_DIVERGED = 1
EXIT_ERROR = 2
EXIT_CORRUPT = 3
EXIT_UNKNOWN = 4
