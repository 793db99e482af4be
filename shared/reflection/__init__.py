"""Reflection bookkeeping shared by the daemon and the reflector workers.

The daemon decides after each turn whether a reflection is due (:mod:`.triggers`), cuts
the unreflected slice of a conversation into a payload (:mod:`.payload`), sends it with
the job (:mod:`.job`), judges what the worker's sub-agent read (:mod:`.verdict`) and, only
when the outcome consumed the slice, advances the watermark (:mod:`.state`). The state
files live under a conversation directory, so the daemon needs no Redis to know where it
stands; a worker reads none of them: everything it needs comes with the job.
"""
