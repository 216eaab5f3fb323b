"""The scheduler (issue #7): jobs in SQL (the authority), one redbeat wake-up entry per active job.

schedules: next_due / describe (pure maths); jobs: Job, parse_job, JobError; manage: JobService and
Actor (permissions); config_jobs: config and builtin jobs upserted at start; sync / fire / kinds /
cleanup: the redbeat entries, firing one due time exactly once, and what each kind does.
See docs/SCHEDULER.md.
"""
