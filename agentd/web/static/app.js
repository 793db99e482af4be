// agentd web view: search-as-you-type over recall, a chat box that streams a turn (the
// reply's text as it is written), Approve / Deny on the tool calls that wait for the
// user's yes, and Remember / Forget on a memory file.
// Plain JavaScript, no dependencies, nothing fetched from elsewhere. Everything shown
// from the server is set as text (textContent), never parsed as HTML.
"use strict";

function csrfToken() {
  const meta = document.querySelector('meta[name="csrf-token"]');
  return meta ? meta.content : "";
}

function element(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

function shortId(id) {
  return id.slice(-8);
}

function setupSearch(form) {
  const input = form.querySelector('input[name="q"]');
  const all = form.querySelector('input[name="all"]');
  const hits = document.getElementById("hits");
  const note = document.getElementById("search-note");
  const agent = form.dataset.agent;
  let timer = null;
  let latest = 0;

  async function search() {
    const query = input.value.trim();
    const asked = ++latest;
    if (!query) {
      hits.replaceChildren();
      note.textContent = "";
      return;
    }
    const params = new URLSearchParams({ q: query });
    if (!all.checked) params.set("conversation", form.dataset.conversation);
    const response = await fetch(`/agents/${agent}/search?${params}`, {
      credentials: "same-origin",
    });
    if (asked !== latest) return; // a newer keystroke's answer is coming
    const body = await response.json();
    if (!response.ok) {
      note.textContent = body.error ? `${body.error.code}: ${body.error.message}` : "search failed";
      hits.replaceChildren();
      return;
    }
    note.textContent = body.incomplete || (body.hits.length ? "" : "no match");
    hits.replaceChildren(
      ...body.hits.map((hit) => {
        const item = element("li", `hit role-${hit.role}`);
        const link = element("a", "mono", shortId(hit.message_id));
        link.href = `/agents/${agent}/messages/${hit.message_id}`;
        item.append(link, " ", element("span", "role", hit.role), " ", element("span", "text", hit.text));
        return item;
      }),
    );
  }

  input.addEventListener("input", () => {
    clearTimeout(timer);
    timer = setTimeout(search, 120);
  });
  all.addEventListener("change", search);
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    search();
  });
}

// One server-sent event block ("event: x\ndata: {...}") as [name, data].
function parseEvent(block) {
  let name = "message";
  const data = [];
  for (const line of block.split("\n")) {
    if (line.startsWith("event: ")) name = line.slice(7);
    else if (line.startsWith("data: ")) data.push(line.slice(6));
  }
  return [name, data.length ? JSON.parse(data.join("\n")) : {}];
}

// The conversation's live view: messages streamed into the transcript, the status line,
// and the calls waiting for approval (each a form with Approve and Deny).
function conversationView() {
  const transcript = document.getElementById("transcript");
  const status = document.getElementById("chat-status");
  const approvals = document.getElementById("approvals");

  function add(role, className, text) {
    const article = element("article", `msg role-${role} ${className} live`);
    const header = element("header");
    header.append(element("span", "role", role));
    article.append(header, element("div", "text", text));
    transcript.append(article);
    article.scrollIntoView({ block: "nearest" });
    return article;
  }

  function waiting(call) {
    const form = element("form", "approval");
    form.dataset.approval = call.id;
    const reason = element("input");
    reason.type = "text";
    reason.name = "reason";
    reason.placeholder = "reason (optional)";
    reason.setAttribute("aria-label", "reason");
    const approve = element("button", "", "Approve");
    approve.type = "submit";
    approve.value = "approve";
    const deny = element("button", "", "Deny");
    deny.type = "submit";
    deny.value = "deny";
    form.append(
      element("div", "call mono", `⚙ ${call.name}(${call.arguments})`),
      element("div", "meta", `approval ${shortId(call.id)} · turn ${shortId(call.turn_id)}`),
      approve, " ", reason, " ", deny,
    );
    approvals.append(form);
    approvals.hidden = false;
    setupApproval(form);
  }

  // A turn's result: a chat's, or the one an answer carried on ({answered, waiting, turn}).
  function finished(data) {
    const turn = data.turn === undefined ? data : data.turn;
    if (data.answered) {
      const form = approvals.querySelector(`form[data-approval="${data.answered.id}"]`);
      if (form) form.remove();
    }
    if (turn === null) {
      status.textContent = `${data.answered.state}; the step's other calls still wait`;
    } else {
      status.textContent = `turn finished: ${turn.stop_reason}`;
      for (const call of turn.approvals || []) waiting(call);
    }
    approvals.hidden = approvals.querySelector("form.approval") === null;
  }

  // The reply being written, shown piece by piece until it is whole.
  let writing = null;

  function write(text) {
    if (writing === null) writing = add("assistant", "writing", "");
    writing.querySelector(".text").textContent += text;
    status.textContent = "writing…";
  }

  function written(text) {
    if (writing === null) add("assistant", "streamed", text);
    else {
      writing.querySelector(".text").textContent = text;
      writing.classList.replace("writing", "streamed");
      writing = null;
    }
  }

  function show(name, data) {
    if (name === "assistant_delta") return write(data.text);
    if (name === "assistant") return written(data.text);
    if (writing !== null) {  // the reply was cut short: it stays as far as it came
      writing.classList.replace("writing", "cut-short");
      writing = null;
    }
    if (name === "model_call") status.textContent = `waiting for ${data.model}…`;
    else if (name === "tool_call") {
      const waits = data.awaiting_approval ? `  (awaiting approval ${shortId(data.awaiting_approval)})` : "";
      add("assistant", "call mono", `⚙ ${data.name}(${data.arguments})${waits}`);
    }
    else if (name === "tool_result") add("tool", data.is_error ? "error" : "", data.content || "");
    else if (name === "reflection") add("system", "reflection", data.line);
    else if (name === "memory_update") add("system", "reminder", "memory changed: <memory_update> reminder sent");
    else if (name === "warning") add("system", "warning", data.message);
    else if (name === "waiting") status.textContent = `waiting: ${data.reason || "busy"}`;
    else if (name === "provider_retry") status.textContent = `retrying (${data.reason})`;
    else if (name === "result") finished(data);
    else if (name === "error") status.textContent = `${data.code}: ${data.message}`;
  }

  // POST ``body`` to ``url`` and show the turn's events as they stream.
  async function post(url, body) {
    const response = await fetch(url, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrfToken() },
      body: JSON.stringify(body),
    });
    if (!response.ok) {
      const text = await response.text();
      let shown = text;
      try {
        const error = JSON.parse(text).error;
        shown = `${error.code}: ${error.message}`;
      } catch (_) { /* plain text */ }
      status.textContent = `refused (${response.status}): ${shown}`;
      return;
    }
    const reader = response.body.pipeThrough(new TextDecoderStream()).getReader();
    let buffer = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffer += value;
      let end;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        show(...parseEvent(buffer.slice(0, end)));
        buffer = buffer.slice(end + 2);
      }
    }
  }

  async function running(buttons, work) {
    for (const button of buttons) button.disabled = true;
    status.textContent = "running…";
    try {
      await work();
    } catch (error) {
      status.textContent = `the connection failed: ${error}`;
    } finally {
      for (const button of buttons) button.disabled = false;
    }
  }

  function setupApproval(form) {
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const answer = event.submitter ? event.submitter.value : "deny";
      const reason = form.querySelector('input[name="reason"]').value.trim();
      const url = `${approvals.dataset.url}/${form.dataset.approval}/${answer}`;
      running(form.querySelectorAll("button"), () => post(url, answer === "deny" && reason ? { reason } : {}));
    });
  }

  function setupChat(form) {
    const textarea = form.querySelector("textarea");
    form.addEventListener("submit", (event) => {
      event.preventDefault();
      const text = textarea.value;
      if (!text.trim()) return;
      add("user", "sent", text);
      textarea.value = "";
      running(form.querySelectorAll("button"), () => post(form.dataset.url, { text }));
    });
  }

  for (const form of approvals.querySelectorAll("form.approval")) setupApproval(form);
  setupChat(document.getElementById("chat"));
}

// Remember and Forget on a memory file's page: JSON POSTs (with the CSRF token); a change
// reloads the page, whose gutter then shows the new commit. Forget lists the lines first
// and removes exactly those, naming the commit they were listed at.
function setupNotes(section) {
  const status = document.getElementById("notes-status");
  const preview = document.getElementById("forget-preview");
  const lines = document.getElementById("forget-lines");
  const confirm = document.getElementById("forget-confirm");
  const path = section.dataset.path;
  let listed = null;

  async function send(action, body) {
    const response = await fetch(`${section.dataset.url}/${action}`, {
      method: "POST",
      credentials: "same-origin",
      headers: { "Content-Type": "application/json", "X-CSRF-Token": csrfToken() },
      body: JSON.stringify({ path, ...body }),
    });
    const text = await response.text();
    let answer = null;
    try {
      answer = JSON.parse(text);
    } catch (_) { /* plain text: a guard's refusal */ }
    if (!response.ok) {
      const error = answer && answer.error;
      status.textContent = error ? `${error.code}: ${error.message}` : `refused (${response.status}): ${text}`;
      return null;
    }
    return answer;
  }

  document.getElementById("remember").addEventListener("submit", async (event) => {
    event.preventDefault();
    const text = event.target.querySelector('input[name="text"]').value;
    const done = await send("remember", { text });
    if (!done) return;
    if (done.commit === null) status.textContent = `${path} holds this line already: ${done.line}`;
    else window.location.reload();
  });

  document.getElementById("forget").addEventListener("submit", async (event) => {
    event.preventDefault();
    const pattern = event.target.querySelector('input[name="pattern"]').value;
    const found = await send("forget", { pattern });
    if (!found) return;
    listed = { pattern, base: found.head };
    lines.replaceChildren(...found.lines.map((line) => element("li", "", `${line.line_no}: ${line.text}`)));
    preview.hidden = found.lines.length === 0;
    status.textContent = found.lines.length ? "" : `no line of ${path} contains that`;
  });

  confirm.addEventListener("click", async () => {
    if (!listed) return;
    confirm.disabled = true;
    const done = await send("forget", { ...listed, confirm: true });
    confirm.disabled = false;
    if (done) window.location.reload();
  });
}

document.addEventListener("DOMContentLoaded", () => {
  const search = document.getElementById("search");
  if (search) setupSearch(search);
  if (document.getElementById("chat")) conversationView();
  const notes = document.getElementById("notes");
  if (notes) setupNotes(notes);
});
