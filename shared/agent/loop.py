"""One turn of an agent: call the model, run its tools, repeat until it answers.

The rule (seed 002, letta v3): a reply that calls tools continues the turn, a reply
without a tool call ends it. Around that rule sit the limits and tool rules, each exit
named by a :data:`StopReason`. Every message is appended (and fsync'd) the moment it
exists: the assistant reply before its tools run, each tool result as it returns, so a
crash at any point loses nothing that was complete. An append the disk refuses ends the
turn with ``disk_full`` and leaves neither the log nor the context window holding it.

A turn that streams (``Turn.stream``: chat turns) sends the reply's text on as the model
writes it (:mod:`.reply_stream`); the log still gets each reply whole, and a reply cut
short by a cancel or a failure keeps what had arrived, marked with how the turn stopped.

A step that calls a tool needing the user's yes stops the turn with
``requires_approval`` and leaves the step waiting on disk (:mod:`.approval_step`);
:func:`resume_turn` carries it out once answered and goes on with the same turn.

The same loop runs chat turns in agentd and reflection sub-agents in the workers, with
other tools, prompts, rules and limits.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import structlog

from shared.agent.approval_step import denial, new_step, settle
from shared.agent.reply_stream import ReplyStream
from shared.agent.request import shape_messages, tool_result_cap, truncate_tool_output
from shared.agent.rules import ToolRules
from shared.agent.tools.base import Tool, ToolContext
from shared.context.budget import Budget, check_floor, measure
from shared.context.compaction import compact
from shared.errors import AgentdError, ContextOverflowError, ToolError
from shared.ids import new_id
from shared.models.approvals import WaitingStep
from shared.models.events import (
    Assistant,
    Compacted,
    Emit,
    ToolAwaitingApproval,
    ToolCalled,
    ToolResult,
    discard,
)
from shared.models.messages import Message, StopPayload, StopReason, ToolCall
from shared.models.turns import TurnResult
from shared.providers.base import ModelRequest, ModelResponse, Provider, RequestPurpose
from shared.store.approvals import save_step, view
from shared.store.conversations import Conversation

log = structlog.get_logger(__name__)


@dataclass
class Turn:
    """Everything one turn needs; built by the caller (the daemon or a reflection job)."""

    conversation: Conversation
    provider: Provider
    tools: list[Tool]
    tool_context: ToolContext
    system_prompt: Callable[[], Awaitable[str]]
    """Called before every step: memory edited mid-turn shows in the next step's prompt."""
    max_steps: int = 50
    summariser: Provider | None = None
    """Model for compaction summaries; None means the turn's own provider."""
    rules: ToolRules = field(default_factory=ToolRules)
    emit: Emit = discard
    turn_id: str = field(default_factory=lambda: new_id("turn"))
    purpose: RequestPurpose = "conversation"
    """What the turn's requests are for (``integration`` for an explicit merge's review)."""
    stream: bool = False
    """Ask the model to stream and send its text on as ``assistant_delta`` events (chat
    turns; a reflection job has nobody to show it to)."""


async def run_turn(turn: Turn, inputs: list[Message]) -> TurnResult:
    """Append ``inputs`` (the user's message and any reminders) and run the turn."""
    runner = _TurnRunner(turn)
    return await runner.run(inputs)


async def resume_turn(turn: Turn, step: WaitingStep) -> TurnResult:
    """Carry out ``step`` (every call answered) and go on with its turn from there.

    ``turn.turn_id`` must be the step's. The result counts the whole turn (its steps and
    assistant messages before it waited, too), so the turn is counted once, when it ends."""
    runner = _TurnRunner(turn)
    return await runner.resume(step)


class _TurnRunner:
    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        self.conversation = turn.conversation
        self.tools = {tool.name: tool for tool in turn.tools}
        self.called: set[str] = set()
        self.reply = ReplyStream(turn.emit, streams=turn.stream)
        self._system: str | None = None
        """The system prompt of the latest request."""
        self.result = TurnResult(
            turn_id=turn.turn_id,
            agent_id=turn.conversation.agent_id,
            conversation_id=turn.conversation.id,
            stop_reason="end_turn",
        )

    async def run(self, inputs: list[Message]) -> TurnResult:
        await self._persist(inputs)
        return await self._finish(self._steps())

    async def resume(self, step: WaitingStep) -> TurnResult:
        self.result.steps = step.steps
        self.result.assistant_messages = step.assistant_messages
        self.result.usage = step.usage
        return await self._finish(self._carry_out(step))

    async def _finish(self, body: Awaitable[StopReason]) -> TurnResult:
        """Await the turn's ``body`` and record how it ended, whatever ended it."""
        try:
            stop = await body
            if stop != "requires_approval":  # a waiting turn is not over: no compaction
                await self._leave_room_for_the_next_turn()
        except AgentdError as exc:
            log.warning("turn_failed", error_code=exc.code, error=exc.message)
            self.result.error = exc.to_dict()
            self._persist_cut_short("error")
            stop = self._persist_stop("error", exc.message, exc.code)
        except asyncio.CancelledError:
            try:
                self._persist_cut_short("cancelled")
                self._persist_stop("cancelled", "the turn was cancelled", "cancelled")
            except (AgentdError, OSError) as exc:
                log.warning("cancelled_stop_not_recorded", error=str(exc))
            self._save_window()
            raise
        except Exception as exc:
            log.exception("turn_crashed")
            error = AgentdError(f"internal error during the turn: {exc!r}; see the agentd log")
            self.result.error = error.to_dict()
            stop = self._persist_stop("error", error.message, error.code)
        await in_thread_to_the_end(self._save_window)
        self.result.stop_reason = stop
        return self.result

    def _save_window(self) -> None:
        """Record the window the turn ended with (``context.json``). Failing is no loss:
        the log has every message, and opening the conversation replays what the file
        does not list."""
        try:
            self.conversation.save_context()
        except (AgentdError, OSError) as exc:
            log.warning("context_not_saved", error=str(exc))

    async def _steps(self, first: int = 0) -> StopReason:
        max_steps = self.turn.max_steps
        for step in range(first, max_steps):
            response = await self._call_model(step)
            self.result.steps += 1
            self.result.usage = self.result.usage + response.usage
            is_last_step = step == max_steps - 1
            if not response.tool_calls:
                missing = self.turn.rules.uncalled_required(self.called)
                if missing and not is_last_step:
                    await self._persist_assistant(response, stop=None)
                    await self._persist_note(
                        "[automated] Do not end the turn yet: first call "
                        + ", ".join(missing)
                        + "."
                    )
                    continue
                stop: StopReason = (
                    "max_tokens" if response.finish_reason == "length" else "end_turn"
                )
                await self._persist_assistant(response, stop=stop)
                return stop
            if {call.name for call in response.tool_calls} & self.turn.rules.requires_approval:
                await self._persist_assistant(response, stop="requires_approval")
                await self._wait_for_approval(response.tool_calls)
                return "requires_approval"
            stop_after_tools = self._stop_after_tools(response.tool_calls, is_last_step)
            await self._persist_assistant(response, stop=stop_after_tools)
            await self._run_tool_calls(response.tool_calls)
            if stop_after_tools is not None:
                return stop_after_tools
        raise AssertionError("unreachable: the last step always decides a stop reason")

    async def _wait_for_approval(self, calls: list[ToolCall]) -> None:
        """Leave the step waiting on disk, after its assistant message is in the log (a
        crash in between leaves calls nobody answers: the next request tells the model
        they were not executed), and name each call that waits."""
        step = new_step(
            self.conversation,
            turn_id=self.turn.turn_id,
            message_id=self.result.message_ids[-1],
            calls=calls,
            needs_approval=self.turn.rules.requires_approval,
            steps=self.result.steps,
            assistant_messages=self.result.assistant_messages,
            usage=self.result.usage,
        )
        await in_thread_to_the_end(save_step, self.conversation.directory, step)
        self.result.approvals = [view(step, call) for call in step.waiting]
        for call, pending in zip(calls, step.calls, strict=True):
            if pending.approval_id is not None:
                await self.turn.emit(
                    ToolAwaitingApproval(
                        id=call.id,
                        name=call.name,
                        arguments=call.arguments,
                        awaiting_approval=pending.approval_id,
                    )
                )

    async def _carry_out(self, step: WaitingStep) -> StopReason:
        """Run the answered step's calls in the model's order (a denied one is given its
        denial), then go on with the turn's next step."""
        cap = tool_result_cap(self.turn.provider.context_window)
        directory = self.conversation.directory
        calls = [
            ToolCall(id=c.tool_call_id, name=c.name, arguments=c.arguments) for c in step.calls
        ]
        try:
            for call, pending in zip(calls, step.calls, strict=True):
                if pending.state == "denied":
                    await self._persist_result(call, denial(pending.reason), True, cap)
                    continue
                pending.state = "running"
                await in_thread_to_the_end(save_step, directory, step)
                await self._run_call(call, cap)
        except BaseException as exc:
            # Settled here, on the loop, as the stop record is written: nothing of the step
            # runs again, and the conversation takes messages again.
            cancelled = isinstance(exc, asyncio.CancelledError)
            why = "the turn was cancelled" if cancelled else "the turn failed"
            try:
                now = self.conversation.clock()
                self.result.message_ids += settle(self.conversation, step, why, now)
            except (AgentdError, OSError) as unsettled:  # agentd's next start settles it
                log.warning("approved_step_not_settled", error=str(unsettled))
            raise
        step.finished_at = self.conversation.clock()
        await in_thread_to_the_end(save_step, directory, step)
        stop = self._stop_after_tools(calls, is_last_step=step.steps >= self.turn.max_steps)
        return stop if stop is not None else await self._steps(first=step.steps)

    def _stop_after_tools(self, calls: list[ToolCall], is_last_step: bool) -> StopReason | None:
        names = {call.name for call in calls}
        if names & self.turn.rules.terminal:
            return "tool_rule"
        if is_last_step:
            return "max_steps"
        return None

    async def _call_model(self, step: int) -> ModelResponse:
        """One model call, compacting first when the request would pass the threshold, and
        once more (then retrying once) if the provider refuses it as too large anyway."""
        provider = self.turn.provider
        request = await self._request()
        budget = measure(request, provider.context_window, provider.token_ratio)
        check_floor(
            budget,
            provider.model,
            setting=provider.context_window_setting,
            agent=self.turn.conversation.agent_id,
        )
        if budget.over_threshold and await self._compact("context_pressure", budget):
            request = await self._request()
        try:
            return await self.reply.call(provider, request, step)
        except ContextOverflowError as exc:
            log.warning("context_overflow", error=exc.message)
            refusal = exc
        budget = measure(request, provider.context_window, provider.token_ratio)
        if await self._compact("context_overflow", budget):
            try:
                return await self.reply.call(provider, await self._request(), step)
            except ContextOverflowError as exc:
                refusal = exc
        raise ContextOverflowError(
            f"{refusal.message}. The conversation is compacted as far as it goes and the "
            "request still does not fit; nothing was lost. Start a new conversation "
            "(`agentctl conversations new`) or use a model with a larger window"
        ) from refusal

    async def _leave_room_for_the_next_turn(self) -> None:
        """Compact after the reply when the window ends the turn over the threshold, so the
        next turn starts with room (and ``agentctl context`` shows what it will send).

        Measured with the last step's system prompt: the next turn compiles its own and
        measures again before it calls the model, and compiling one here would read
        memory's HEAD on the event loop once more for every turn of every agent."""
        request = await self._request(prompt=self._system)
        provider = self.turn.provider
        budget = measure(request, provider.context_window, provider.token_ratio)
        if not budget.over_threshold:
            return
        try:
            await self._compact("context_pressure", budget)
        except AgentdError as exc:
            log.warning("post_turn_compaction_failed", error=exc.message)

    async def _compact(self, trigger: str, budget: Budget) -> bool:
        stats = await compact(
            self.conversation,
            self.turn.summariser or self.turn.provider,
            budget,
            trigger=trigger,
            turn_id=self.turn.turn_id,
        )
        if stats is None:
            return False
        self.result.message_ids.append(self.conversation.context[0].id)
        await self.turn.emit(Compacted(**stats.model_dump()))
        return True

    async def _request(self, *, prompt: str | None = None) -> ModelRequest:
        """The request for the window as it stands, with the system prompt compiled now
        (memory may have changed since the last step) unless ``prompt`` is given."""
        self._system = prompt if prompt is not None else await self.turn.system_prompt()
        return ModelRequest(
            system=self._system,
            messages=shape_messages(self.conversation.context),
            tools=[tool.schema for tool in self.turn.tools],
            purpose=self.turn.purpose,
        )

    async def _run_tool_calls(self, calls: list[ToolCall]) -> None:
        cap = tool_result_cap(self.turn.provider.context_window)
        for call in calls:
            await self._run_call(call, cap)

    async def _run_call(self, call: ToolCall, cap: int) -> None:
        await self.turn.emit(ToolCalled(id=call.id, name=call.name, arguments=call.arguments))
        text, is_error = await self._run_tool(call)
        self.called.add(call.name)
        await self._persist_result(call, text, is_error, cap)

    async def _persist_result(self, call: ToolCall, text: str, is_error: bool, cap: int) -> None:
        message = self._message(
            role="tool",
            content=truncate_tool_output(text, cap),
            tool_call_id=call.id,
            name=call.name,
            is_error=is_error,
        )
        await self._persist([message])
        await self.turn.emit(
            ToolResult(
                tool_call_id=call.id, name=call.name, content=message.content, is_error=is_error
            ),
        )

    async def _run_tool(self, call: ToolCall) -> tuple[str, bool]:
        tool = self.tools.get(call.name)
        if tool is None:
            available = ", ".join(sorted(self.tools)) or "none"
            return f"unknown tool {call.name!r}; available tools: {available}", True
        try:
            args = call.parsed_arguments()
        except ValueError as exc:
            return f"could not call {call.name}: {exc}", True
        # An error's text may name a host path (git's "failed in /home/…/memory"): the model
        # knows its directories by other names in the sandbox (shared.agent.tools.view).
        scrub = self.turn.tool_context.names().scrub
        try:
            with structlog.contextvars.bound_contextvars(tool=call.name, tool_call_id=call.id):
                return await tool.run(args, self.turn.tool_context), False
        except ToolError as exc:
            return scrub(str(exc)), True
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("tool_crashed", tool=call.name)
            return scrub(f"{call.name} failed unexpectedly: {exc!r}"), True

    async def _persist_assistant(self, response: ModelResponse, stop: StopReason | None) -> None:
        message = self._message(
            role="assistant",
            content=response.text,
            tool_calls=response.tool_calls,
            usage=response.usage,
            model=response.model or self.turn.provider.model,
            stop_reason=stop,
        )
        await self._persist([message])
        self.result.assistant_messages += 1
        if response.text:
            self.result.text = response.text
            await self.turn.emit(Assistant(text=response.text))

    async def _persist_note(self, text: str) -> None:
        await self._persist([self._message(role="user", kind="note", content=text)])

    def _persist_cut_short(self, stop: StopReason) -> None:
        """Keep the text of a reply that was being streamed when the turn ended (what the
        user was shown), as the reply, marked with ``stop``."""
        text = self.reply.cut_short()
        if text:
            message = self._message(
                role="assistant", content=text, model=self.turn.provider.model, stop_reason=stop
            )
            self._persist_now([message])

    def _persist_stop(self, stop: StopReason, text: str, code: str) -> StopReason:
        """Record why the turn stopped. If that append fails too (the disk that failed the
        turn is still full) its error ends the turn: the caller is told ``disk_full``
        rather than a stop reason the transcript does not hold."""
        message = self._message(
            role="assistant",
            kind="stop",
            content=text,
            stop_reason=stop,
            payload=StopPayload(code=code),
        )
        self._persist_now([message])
        return stop

    async def _persist(self, messages: list[Message]) -> None:
        """Append in a thread: the log is fsync'd, milliseconds that the event loop, and
        every other conversation on it, would otherwise wait."""
        await in_thread_to_the_end(self._persist_now, messages)

    def _persist_now(self, messages: list[Message]) -> None:
        self.conversation.append(messages)
        self.result.message_ids.extend(m.id for m in messages)

    def _message(self, **fields: Any) -> Message:
        return self.conversation.new_message(turn_id=self.turn.turn_id, **fields)


async def in_thread_to_the_end(write: Callable[..., None], *args: Any) -> None:
    """Run ``write`` in a thread. A cancel landing meanwhile takes effect once it is done,
    so whatever is written next (the stop record, the next turn's window) never races it."""
    writing = asyncio.ensure_future(asyncio.to_thread(write, *args))
    cancelled: asyncio.CancelledError | None = None
    while not writing.done():
        try:
            await asyncio.shield(writing)
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is not None:
        raise cancelled
    writing.result()
