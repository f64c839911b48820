"""Preemption: notice watchers (signals, AWS/GCP/Azure metadata), the emergency save decision,
and the local demonstration (``BURST_PREEMPT_AT_STEPS``). See docs/preemption.md."""
