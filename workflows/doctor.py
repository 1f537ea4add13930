"""``FleetDoctor``: the workflow a Temporal Schedule starts to do what ``agent-worker doctor`` does
(``agent-worker doctor --schedule 15m``): one ``doctor.check`` of the running tasks, its report the
workflow's result (the Temporal UI and ``temporal workflow show`` show it), each finding a warning in
the worker log and a count on ``agent_worker_doctor_findings``."""

from __future__ import annotations

from temporalio import workflow

with workflow.unsafe.imports_passed_through():
    from agent_worker.activities.health import HealthActivities
    from agent_worker.schemas.health import DoctorInput, DoctorReport

from agent_worker.workflows import options


@workflow.defn(name="FleetDoctor")
class FleetDoctorWorkflow:
    """Runs ``doctor.check`` once."""

    @workflow.run
    async def run(self, input: DoctorInput) -> DoctorReport:
        where = f" of {input.task_queue}" if input.task_queue else ""
        return await workflow.execute_activity_method(
            HealthActivities.check,
            input,
            **options.config(options.DOCTOR, summary=f"check the running tasks{where}"),
        )
