"""What the tests share, apart from the tests themselves: a real dev server and workers on their own
task queues (``support``), the agents the tests register (``agents``, ``user_agents``), fault
injection (``faults``, ``matrix``), stand-ins for external services run for real on loopback
(``openai_stub``, ``e2b_standin``, ``postgres_server``, ``business_backends``, ``browser``) and the
fuzzing strategies (``fuzz_strategies``). Nothing here is part of the distribution's API."""

__all__: list[str] = []
