"""Which model answers an agent's turn: providers by name, model strings by prefix, fallback chains.

A model string names its provider by prefix, as the Agents SDK's ``MultiProvider`` does:
``local/qwen2`` is model ``qwen2`` of provider ``local``; a string without a prefix (``gpt-4.1``)
belongs to ``openai``. Providers come from ``WorkerConfig.model_providers()``: ``openai`` from the
``OPENAI_*`` settings, ``litellm`` (the SDK's LiteLLM extension, for Anthropic, Gemini, Bedrock,
Ollama, ...), and any the user names in ``AGENT_WORKER_PROVIDERS``.

An agent's model is, in order: its registration's ``model``, the built ``Agent``'s own ``model``,
the worker's default (``AGENT_WORKER_OPENAI_MODEL``); each may be a string or a ``Model``. Its
registration's ``fallback`` models follow: when one fails with an outage (HTTP 5xx, no connection,
a timeout) or is out of quota (429 ``insufficient_quota``), the next answers, and the call's record
says which model answered and why each earlier one was skipped. Any other failure, or the last
model's, leaves the turn as it is, for Temporal to retry or not (``provider_errors``): every client
is built with ``max_retries=0`` so that Temporal is the one owner of retries.

``resolve_chain`` is also the worker's start check (``check_models``): an agent whose model names an
unknown provider, or a provider without the base URL or key it needs, stops the worker at start with
a message naming the agent and the setting. For a LiteLLM model the check asks LiteLLM which
variables it lacks (``litellm.validate_environment``): a missing API key stops the worker; other
missing settings (cloud credentials, which may come from a role or a file) are a warning.

LiteLLM's OpenAI-compatible route (``litellm/openai/<model>`` with a ``base_url``) needs no key, as
the ``openai`` provider does not: with none given, a placeholder is sent (the ``openai`` client that
LiteLLM drives insists on one). LiteLLM is imported with ``LITELLM_LOCAL_MODEL_COST_MAP=True``
(unless the environment says otherwise), so it reads its bundled cost map instead of fetching one
from the internet at every start (``use_bundled_litellm_cost_map``).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass, field
from typing import Any

import structlog
from agent_worker.activities.agent.provider_errors import REJECTED, UNAVAILABLE, provider_failure
from agent_worker.activities.agent.registry import AgentRegistration
from agent_worker.activities.errors import AgentError
from agent_worker.schemas.config import ConfigError, ProviderConfig, WorkerConfig
from agent_worker.security.redact import redact
from agents import Agent
from agents.items import ModelResponse, TResponseStreamEvent
from agents.models.interface import Model

log = structlog.get_logger(__name__)

SCRIPTED = "scripted"
CUSTOM = "custom"
# A skip reason is for people reading events: the provider's words, cut.
REASON_CHARS = 300
_QUOTA_CODES = frozenset({"insufficient_quota", "billing_hard_limit_reached"})
# A local server needs no key, but the ``openai`` client insists on one: any placeholder will do.
NO_KEY = "no-key"
# LiteLLM's own switch: read the bundled model cost map, never fetch one (must be set before import).
LITELLM_LOCAL_COST_MAP = "LITELLM_LOCAL_MODEL_COST_MAP"
# LiteLLM's route to any OpenAI-compatible server (``litellm/openai/<model>`` + a base URL).
_LITELLM_OPENAI_ROUTE = "openai/"


@dataclass(frozen=True)
class ModelChoice:
    """One model of an agent's chain, and how its calls are recorded.

    Attributes:
        model: The SDK model that is called.
        provider: The provider's name (``openai``, ``local``, ...; ``scripted``; ``custom`` for a
            ``Model`` instance the agent brings).
        api: ``responses``, ``chat_completions``, ``litellm``, ``scripted`` or ``custom``.
        name: The model's name at its provider (``qwen2``).
        label: What usage, events and metrics call it: ``provider:name``, with the provider's base
            URL (its credentials masked) when it has one.
    """

    model: Model
    provider: str
    api: str
    name: str
    label: str

    @property
    def scripted(self) -> bool:
        return self.provider == SCRIPTED


def resolve_chain(
    registration: AgentRegistration, agent: Agent[Any], config: WorkerConfig
) -> list[ModelChoice]:
    """The models that answer ``registration``'s turns under ``config``, first choice first.

    Raises:
        ConfigError: a model names an unknown provider, or a provider misses a setting it needs
            (the message names the agent and the setting).
        AgentError: no real provider is configured and the agent has no scripted model.
    """
    own = registration.model if registration.model is not None else agent.model or None
    if config.model_provider == "scripted":
        return [_scripted(registration)]
    # With no provider configured, the demo's way: scripted models, unless the agent brings only
    # its own model (which then must resolve).
    if not config.uses_openai and (registration.scripted_model is not None or own is None):
        return [_scripted(registration)]
    primary = own if own is not None else config.openai_model
    providers = config.model_providers()
    return [_choice(registration.name, m, providers) for m in (primary, *registration.fallback)]


def check_models(registrations: Iterable[AgentRegistration], config: WorkerConfig) -> None:
    """Resolve every agent's chain once, at worker start, so a broken model setting stops the worker
    there rather than failing its first task.

    Raises:
        ConfigError: naming the first agent whose model cannot be resolved, and why.
    """
    providers = config.model_providers()
    for registration in registrations:
        try:
            chain = resolve_chain(registration, registration.build(), config)
        except AgentError as err:
            if config.model_provider != "scripted":
                raise ConfigError(str(err)) from None
            # Scripted on purpose (tests, demos): such an agent's tasks fail at their first turn.
            log.warning("agent has no scripted model", agent=registration.name)
            continue
        for choice in chain:
            if choice.api == "litellm":
                _check_litellm_credentials(registration.name, choice, providers[choice.provider])


def use_bundled_litellm_cost_map() -> None:
    """Have LiteLLM read its bundled model cost map rather than fetch one from the internet when it
    is imported (three attempts and seconds of warnings on a host without internet access).

    Called at the worker's start and before this module imports LiteLLM; an explicit
    ``LITELLM_LOCAL_MODEL_COST_MAP`` in the environment is left as it is.
    """
    os.environ.setdefault(LITELLM_LOCAL_COST_MAP, "True")


def split_model(model: str) -> tuple[str, str]:
    """``local/qwen2`` -> (``local``, ``qwen2``); no prefix -> (``openai``, the string)."""
    if "/" in model:
        prefix, name = model.split("/", 1)
        return prefix, name
    return "openai", model


def _scripted(registration: AgentRegistration) -> ModelChoice:
    if registration.scripted_model is None:
        raise AgentError(
            f"agent {registration.name!r} has no model: no provider is configured and it has no "
            "scripted model (set OPENAI_API_KEY, or OPENAI_BASE_URL for a server without keys, or "
            "AGENT_WORKER_PROVIDERS; or give the agent a model or a scripted_model)",
            operation="agent.turn",
            retryable="no",
        )
    model = registration.scripted_model()
    name = type(model).__name__
    if registration.scripted_models:
        model = AgentRoutedModel(
            model, {agent: make() for agent, make in registration.scripted_models.items()}
        )
    return ModelChoice(model, SCRIPTED, SCRIPTED, name, f"{SCRIPTED}:{name}")


@dataclass
class AgentRoutedModel(Model):
    """Scripted models by SDK agent: after a handoff the specialist answers with its own script.

    The turn names the agent about to call the model (``current``, from the run's ``on_llm_start``
    hook, which the SDK calls right before each model call); an agent without its own model, or a
    call outside the run (a compaction), gets ``default``.
    """

    default: Model
    by_agent: dict[str, Model]
    current: str = ""

    def _model(self) -> Model:
        return self.by_agent.get(self.current, self.default)

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return await self._model().get_response(*args, **kwargs)

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        return self._model().stream_response(*args, **kwargs)


def _choice(agent: str, model: str | Model, providers: dict[str, ProviderConfig]) -> ModelChoice:
    if isinstance(model, Model):
        name = str(getattr(model, "model", "") or type(model).__name__)
        return ModelChoice(model, CUSTOM, CUSTOM, name, f"{CUSTOM}:{name}")
    prefix, name = split_model(model)
    provider = providers.get(prefix)
    if provider is None:
        raise ConfigError(
            f"agent {agent!r}: model {model!r} names provider {prefix!r}, which is not configured "
            f"(configured: {', '.join(sorted(providers))}); add it with AGENT_WORKER_PROVIDERS or "
            f"AGENT_WORKER_PROVIDER_{prefix.upper()}_BASE_URL"
        )
    if not name:
        raise ConfigError(f"agent {agent!r}: model {model!r} names no model after {prefix + '/'!r}")
    if provider.kind == "litellm":
        return _litellm_choice(agent, prefix, name, provider)
    if provider.api_key is None and not provider.base_url:
        setting = (
            "OPENAI_API_KEY (or OPENAI_BASE_URL for a server without keys)"
            if prefix == "openai"
            else f"AGENT_WORKER_PROVIDER_{prefix.upper()}_API_KEY or _BASE_URL"
        )
        raise ConfigError(f"agent {agent!r}: model {model!r} needs {setting}")
    return ModelChoice(
        _openai_model(name, provider), prefix, provider.api, name, _label(prefix, name, provider)
    )


def _label(prefix: str, name: str, provider: ProviderConfig) -> str:
    # The label reaches usage, status and events: never the credentials of the base URL.
    return f"{prefix}:{name}" + (f"@{redact(provider.base_url)}" if provider.base_url else "")


def _openai_model(name: str, provider: ProviderConfig) -> Model:
    from agents.models.openai_provider import OpenAIProvider
    from openai import AsyncOpenAI

    options: dict[str, Any] = {}
    if provider.timeout_seconds is not None:
        options["timeout"] = provider.timeout_seconds
    key = provider.api_key.get_secret_value() if provider.api_key else NO_KEY
    # Temporal owns retries: the client must not retry behind its back.
    client = AsyncOpenAI(api_key=key, base_url=provider.base_url, max_retries=0, **options)
    return OpenAIProvider(openai_client=client, use_responses=provider.api == "responses").get_model(name)


def _litellm_choice(agent: str, prefix: str, name: str, provider: ProviderConfig) -> ModelChoice:
    use_bundled_litellm_cost_map()
    try:
        from agents.extensions.models.litellm_model import LitellmModel
    except ImportError:
        raise ConfigError(
            f"agent {agent!r}: model {prefix}/{name} uses LiteLLM, which is not installed "
            "(pip install 'agent-worker[litellm]')"
        ) from None
    extra: dict[str, Any] = {"num_retries": 0, "max_retries": 0}
    if provider.timeout_seconds is not None:
        extra["timeout"] = provider.timeout_seconds

    class NoRetryLitellmModel(LitellmModel):
        """LiteLLM with its own retries off (Temporal owns them) and the provider's timeout."""

        async def get_response(
            self, system_instructions: Any, input: Any, model_settings: Any, *a: Any, **k: Any
        ):  # type: ignore[override]
            settings = dataclasses.replace(
                model_settings, extra_args={**(model_settings.extra_args or {}), **extra}
            )
            return await super().get_response(system_instructions, input, settings, *a, **k)

    model = NoRetryLitellmModel(model=name, base_url=provider.base_url, api_key=_litellm_key(name, provider))
    return ModelChoice(model, prefix, "litellm", name, _label(prefix, name, provider))


def _litellm_key(name: str, provider: ProviderConfig) -> str | None:
    """The key LiteLLM is given: the provider's; a placeholder for an OpenAI-compatible server
    without one; else none, and LiteLLM reads its own variables (``ANTHROPIC_API_KEY``, ...)."""
    if provider.api_key is not None:
        return provider.api_key.get_secret_value()
    if provider.base_url and name.startswith(_LITELLM_OPENAI_ROUTE):
        return NO_KEY
    return None


def _check_litellm_credentials(agent: str, choice: ModelChoice, provider: ProviderConfig) -> None:
    """Stop the start when LiteLLM lacks the API key a model needs (``litellm.validate_environment``
    reads the variables LiteLLM itself would); warn when it lacks other settings (AWS or Google
    credentials may come from a role or a file that it does not look at).

    Raises:
        ConfigError: naming the agent, the model, LiteLLM's variables and the provider's setting.
    """
    import litellm

    try:
        found = litellm.validate_environment(
            model=choice.name, api_key=_litellm_key(choice.name, provider), api_base=provider.base_url
        )
    except Exception as err:  # a model LiteLLM cannot place: its call will say so, as before
        log.warning("LiteLLM cannot check this model", agent=agent, model=choice.name, error=str(err))
        return
    missing = [str(key) for key in found.get("missing_keys") or []]
    if not missing:
        return
    model = f"{choice.provider}/{choice.name}"
    setting = f"AGENT_WORKER_PROVIDER_{choice.provider.upper()}_API_KEY"
    if all(key.endswith("_API_KEY") for key in missing):
        server = (
            f" (or {setting.removesuffix('_API_KEY')}_BASE_URL for an OpenAI-compatible server without keys)"
            if choice.name.startswith(_LITELLM_OPENAI_ROUTE)
            else ""
        )
        raise ConfigError(
            f"agent {agent!r}: model {model!r} needs an API key: set {' or '.join(missing)} "
            f"(LiteLLM's variable) or {setting}{server}"
        )
    log.warning(
        "LiteLLM finds no credentials for this model in the environment; its calls will fail "
        "unless they come from elsewhere (a role, a credentials file)",
        agent=agent,
        model=model,
        missing=missing,
    )


def fallback_reason(err: BaseException) -> str | None:
    """Why a failed call passes to the next model (``outage: ...``, ``quota: ...``), or ``None``
    when it must not (a bad request, a rate limit to wait out, an error that is not the provider's)."""
    failure = provider_failure(err)
    if failure is None:
        return None
    details = failure.details[0] if failure.details and isinstance(failure.details[0], dict) else {}
    status = details.get("status_code")
    words = failure.message[:REASON_CHARS]
    if failure.type == UNAVAILABLE or (isinstance(status, int) and status >= 500):
        return f"outage: {words}"
    if failure.type == REJECTED and details.get("provider_code") in _QUOTA_CODES:
        return f"quota: {words}"
    return None


@dataclass
class ModelChain(Model):
    """Calls the chain's models in order until one answers (see the module docstring); after each
    call, ``last_call`` says which answered and why the ones before it were skipped."""

    choices: list[ModelChoice]
    last_call: dict[str, Any] = field(default_factory=dict)

    async def get_response(self, *args: Any, **kwargs: Any) -> ModelResponse:
        skipped: list[dict[str, str]] = []
        for position, choice in enumerate(self.choices):
            try:
                response = await choice.model.get_response(*args, **kwargs)
            except Exception as err:
                reason = fallback_reason(err)
                if reason is None or position == len(self.choices) - 1:
                    raise
                log.warning("model skipped; the next in the chain answers", model=choice.label, reason=reason)
                skipped.append({"model": choice.label, "provider": choice.provider, "reason": reason})
                continue
            self.last_call = {
                "model": choice.label,
                "provider": choice.provider,
                "api": choice.api,
                "skipped": skipped,
            }
            return response
        raise AssertionError("a model chain is never empty")

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[TResponseStreamEvent]:
        return self.choices[0].model.stream_response(*args, **kwargs)


__all__ = [
    "AgentRoutedModel",
    "ModelChain",
    "ModelChoice",
    "check_models",
    "fallback_reason",
    "resolve_chain",
    "split_model",
    "use_bundled_litellm_cost_map",
]
