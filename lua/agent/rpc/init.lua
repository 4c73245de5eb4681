--- The channel to the backend, for the rest of the plugin. Its parts live beside it:
--- - wire.lua: the only place that sends (vim.rpcnotify), and the notification names;
--- - job.lua: the backend job (which binary, start, stop, exit);
--- - buffers.lua: the backend's questions about buffers.
---
--- One backend serves every conversation (lua/agent/conversations.lua): what is sent carries
--- the number of the conversation acted for (wire.lua adds it), and each event received carries
--- the one whose chat shows it.
---
--- Lua → Rust: notifications (`start`, `prompt`, `cancel`, `new`, `decide`, `acp`, `resume`,
--- `rewind`, `close`), so Neovim never waits on the backend; the requests `sessions` (a directory listing),
--- `rewind_points` (the checkpoints' list), `changes`, `file_at` (:Agent diff), `files` and
--- `attach` (the input's `@` and `#`, answered from memory or one clamped read). Rust → Lua: `receive(events)` with a list of event maps at most
--- once a frame, and the buffer queries `buffer_state`, `buffer_text`, `reload`, `checktime`.
--- The shapes are declared in src/front/nvim/protocol.rs; keep the two in step and bump PROTOCOL in
--- both when one changes.

local buffers = require("agent.rpc.buffers")
local job = require("agent.rpc.job")
local paths = require("agent.paths")
local wire = require("agent.rpc.wire")

local M = {}
local H = {}

H.files_seq = 0 -- the number of the last `files` query
H.files_waiting = nil ---@type { seq: integer, done: function }?

--- The protocol this file speaks; a backend announcing another one is stopped, with a message
--- saying how to rebuild it.
M.PROTOCOL = 14

--- The plugin's root: the directory holding lua/ and plugin/.
M.plugin_root = paths.root
--- The log file the backend writes (`agent-nvim nvim --log FILE`).
M.logfile = paths.logfile
--- The backend binary to run, or nil and a message saying how to get one.
M.backend = job.backend
--- The workspace: the running backend's, else the one a backend started now would get.
M.workspace = job.workspace
--- True while a backend process is running.
M.running = job.running
--- The `started` event of the running backend (version, protocol, provider, model, workspace).
M.info = job.info
--- Starts the backend unless it runs, and sends it `start`. On failure shows why and what to do.
M.ensure = job.ensure
--- Stops the backend (its exit is not reported). The next prompt starts a new one.
M.shutdown = job.shutdown

-- The buffer queries Rust calls (protocol.rs `lua`).
M.buffer_state = buffers.buffer_state
M.buffer_text = buffers.buffer_text
M.reload = buffers.reload
M.checktime = buffers.checktime

--- Runs a turn on `text`, with the images (and audio clips) the backend holds under the numbers
--- `images`. With `branch`, as a new branch from before prompt `branch.turn` (:help
--- agent-branches), and with `branch.again` that prompt sent again as it was (`text` unused): the answer regenerated.
---@param text string
---@param images? integer[]
---@param branch? { turn: integer, again?: boolean }
function M.prompt(text, images, branch)
  wire.notify(wire.method.PROMPT, {
    text = text,
    images = images and #images > 0 and images or nil,
    branch = branch and branch.turn or nil,
    again = branch and branch.again or nil,
  })
end

--- Switches, at prompt `turn`, to the branch `step` places after the current one (before it
--- when negative); the chat is drawn again as that branch, or an error says why not.
---@param turn integer
---@param step integer
function M.branch(turn, step)
  wire.notify(wire.method.BRANCH, { turn = turn, step = step })
end

--- The text prompt `turn` was sent with (its attachments' rows and text included), or nil and
--- why.
---@param turn integer
---@return string?
---@return string? err
function M.prompt_text(turn)
  return wire.request(wire.request_name.PROMPT_TEXT, { turn = turn })
end

--- Connects to an external ACP agent; prompts go to it until `new`.
---@param name string
---@param cmd? string[] a configured command (nil: the backend's preset for `name`)
---@param env? table<string, string>
---@param sandbox? boolean start it inside run_bash's sandbox (`acp.agents.NAME.sandbox`)
---@param directories? (string|{ path: string, writable?: boolean })[] more roots for its session
---@param load? string once connected, load the agent's session of this id (a fork's)
function M.acp(name, cmd, env, sandbox, directories, load)
  if not M.ensure() then
    return
  end
  -- The agent sends its commands as it starts, maybe before it is reported connected.
  H.conversation().agent_commands = {}
  H.conversation().agent = name
  require("agent.choices").reset()
  -- An empty Lua table would travel as an array; leave empty ones out.
  wire.notify(wire.method.ACP, {
    name = name,
    connect_timeout = require("agent.config").options.acp.connect_timeout,
    cmd = (cmd and #cmd > 0) and cmd or nil,
    env = (env and next(env)) and env or nil,
    sandbox = sandbox == true,
    directories = (directories and #directories > 0) and vim.tbl_map(function(dir)
      return type(dir) == "string" and { path = dir, writable = false }
        or { path = dir.path, writable = dir.writable == true }
    end, directories) or nil,
    load = load,
    mcp_servers = H.mcp_servers(name),
    editor_tools = require("agent.config").options.editor_tools == true,
  })
end

-- The MCP servers for agent `name`, as the backend reads them (nil when there are none; an
-- empty map left out, as it would travel as an array).
function H.mcp_servers(name)
  local list = require("agent.config").mcp_servers_for(name)
  if #list == 0 then
    return nil
  end
  return vim.tbl_map(function(server)
    return {
      name = server.name,
      command = server.command,
      args = (server.args and #server.args > 0) and server.args or nil,
      env = (server.env and next(server.env)) and server.env or nil,
      url = server.url,
      headers = (server.headers and next(server.headers)) and server.headers or nil,
      type = server.type,
    }
  end, list)
end

--- Continues saved conversation `id` (the chat is sent its events again, then `resumed`).
---@param id string
function M.resume(id)
  wire.notify(wire.method.RESUME, { id = id })
end

---@class agent.Session
---@field id string `agent:{name}:{its id}` for an external agent's own session
---@field title string the first line of its first prompt (an agent's: its title, or empty)
---@field updated? integer when it was last written, seconds since the epoch (an agent may not say)
---@field age? string how long ago that was (`4 min ago`), as the backend words it
---@field prompts? integer (not for an agent's own session)
---@field tokens? integer (not for an agent's own session)
---@field problem? string why it cannot be resumed (unreadable, another format version)
---@field agent? string the external agent whose session it is (listed by it, or saved here with a note)
---@field session? string that agent's id for it

--- This workspace's saved conversations, the most recent first; nil and why when the backend
--- cannot answer.
---@return agent.Session[]? sessions
---@return string? err
function M.sessions()
  return wire.request(wire.request_name.SESSIONS)
end

--- The conversation as markdown, from its saved file: `{ id, markdown }`, or nil and why.
---@return { id: string, markdown: string }?
---@return string? err
function M.export()
  return wire.request(wire.request_name.EXPORT)
end

--- Names the conversation `title` in its saved file (`:Agent name`).
---@param title string
function M.renamed(title)
  wire.notify(wire.method.RENAME, { title = title })
end

--- Names saved conversation `id` `title`; the title, or nil and why.
---@param id string
---@param title string
---@return string?
---@return string? err
function M.session_rename(id, title)
  return wire.request(wire.request_name.SESSION_RENAME, { id = id, title = title })
end

--- Forks the conversation's saved file before prompt `turn` (all of it: nil), named `title`:
--- `{ id }`, the new file's id (to resume), and with `code` `checkpoint`, the files then (for
--- the fork's worktree to adopt); or nil and why.
---@param turn? integer
---@param title string
---@param code? boolean
---@return { id: string, checkpoint?: string }?
---@return string? err
function M.fork(turn, title, code)
  return wire.request(wire.request_name.FORK, { turn = turn, title = title, code = code or nil })
end

--- Restores conversation `from`'s checkpoint into this conversation's own worktree: what was
--- done, or nil and why.
---@param from integer
---@param checkpoint string
---@param session string the fork's saved file, moved to this conversation's workspace
---@return string?
---@return string? err
function M.adopt(from, checkpoint, session)
  return wire.request(wire.request_name.ADOPT, { from = from, checkpoint = checkpoint, session = session })
end

--- Deletes saved conversation `id` (its file, its note, its checkpoints' refs); what was
--- done, or nil and why.
---@param id string
---@return string?
---@return string? err
function M.session_delete(id)
  return wire.request(wire.request_name.SESSION_DELETE, { id = id })
end

---@class agent.PermissionRow
---@field rule string the rule as written, made visible
---@field raw string the rule exactly (what `remove` takes)
---@field origin string `permissions.allow`, `permissions.ask`, `permissions.deny` (setup()) or `saved`
---@field removable boolean true for a saved rule

--- The rules in force for this workspace (setup()'s, then those saved by "Allow always in this
--- project"), after removing the saved rule `remove` when given; nil and why when the backend
--- cannot answer (or the rule is not saved).
---@param remove? string
---@return { rules: agent.PermissionRow[], file?: string, problem?: string }? answer
---@return string? err
function M.permissions(remove)
  return wire.request(wire.request_name.PERMISSIONS, remove and { remove = remove } or nil)
end

--- Switches the model of the following prompts to `name` (the running turn keeps its own); a
--- backend started later starts with it too. Nil and why when the conversation cannot switch.
---@param name string
---@return string? model
---@return string? err
function M.model(name)
  local model, err = wire.request(wire.request_name.MODEL, { name = name })
  if model then
    H.conversation().chosen_model = model
  end
  return model, err
end

---@class agent.ModelOffer
---@field models string[] the model table's entries for the provider, and Ollama's own list
---@field problem? string why the Ollama server's list is missing

--- The models the built-in conversation's provider offers (asked of the backend: Ollama's are
--- listed by its server); nil and why when there is no provider or no backend.
---@return agent.ModelOffer? offer
---@return string? err
function M.models()
  return wire.request(wire.request_name.MODELS)
end

--- The model a backend started now would use: the one switched to, else setup()'s (nil: the
--- provider's default).
---@return string?
function M.chosen_model()
  return H.conversation().chosen_model or require("agent.config").options.model
end

--- This workspace's saved conversations' ids, most recent first, without reading them or asking
--- an external agent: for completion.
---@return string[]? ids
---@return string? err
function M.session_ids()
  return wire.request(wire.request_name.SESSIONS, { ids = true })
end

---@class agent.RewindPoint
---@field turn integer the prompt's number in the conversation, from 1
---@field id string the checkpoint taken just before it
---@field row string the list's line: `3 · fix the failing test · 2 files changed · 4 min ago`

--- The current conversation's prompts a rewind can go back to, the newest first; nil and why
--- when the backend cannot answer (checkpoints off, no backend).
---@return agent.RewindPoint[]? points
---@return string? err
function M.rewind_points()
  return wire.request(wire.request_name.REWIND_POINTS)
end

--- Goes back to before prompt `turn`: its code, its conversation or both (the backend answers
--- with `rewound`, or an error saying why nothing changed).
---@param turn integer
---@param mode "code"|"conversation"|"both"
---@param others? "keep"|"restore" what to do with other conversations' later changes, once the
--- person was asked (`rewind_ask`); nil: the backend asks first when there are any
function M.rewind(turn, mode, others)
  wire.notify(wire.method.REWIND, { turn = turn, mode = mode, others = others })
end

--- What changed since `since` (`"prompt"`, `"all"` or a prompt checkpoint's id): `{ checkpoint,
--- since, files = { { path, shown, status, added?, removed?, binary? } } }`; nil and why when
--- there is nothing to compare with (see protocol.rs `request::CHANGES`).
---@param since string
---@return table? changes
---@return string? err
function M.changes(since)
  return wire.request(wire.request_name.CHANGES, { since = since })
end

--- The text `path` (workspace-relative) had at `checkpoint`: `{ text }` or `{ missing = true }`;
--- nil and why for a binary or too large file.
---@param checkpoint string
---@param path string
---@return table? old
---@return string? err
function M.file_at(checkpoint, path)
  return wire.request(wire.request_name.FILE_AT, { checkpoint = checkpoint, path = path })
end

--- Puts back the files an external agent changed by itself (`paths`, workspace-relative) as
--- `checkpoint` had them (protocol.rs `request::UNDO_OUTSIDE`): what was done, or nil and why.
---@param checkpoint string
---@param paths string[]
---@return string? said
---@return string? err
function M.undo_outside(checkpoint, paths)
  return wire.request(wire.request_name.UNDO_OUTSIDE, { checkpoint = checkpoint, paths = paths })
end

--- Asks the conversation's own worktree (protocol.rs `request::WORKTREE`): `{ action =
--- "changes" | "merge" | "remove", force? }`; its answer, or nil and why.
---@param arg { action: string, force?: boolean }
---@return table? answer
---@return string? err
function M.worktree(arg)
  return wire.request(wire.request_name.WORKTREE, arg)
end

--- Every live conversation's age, as the backend words it: `{ [number] = "4 min ago" }`;
--- empty when no backend runs.
---@return table<integer, string>
function M.ages()
  local ages = {}
  if not job.running() then
    return ages
  end
  local listed = wire.request(wire.request_name.CONVERSATIONS)
  for _, row in ipairs(type(listed) == "table" and listed or {}) do
    ages[row.conversation] = row.age
  end
  return ages
end

--- Compacts the conversation now (`:Agent compact`): a `compacted` event or an error, then `idle`.
function M.compact()
  wire.notify(wire.method.COMPACT)
end

--- Chooses one of the external agent's modes (`kind` "mode", `id` the mode's) or a config
--- option's value (`kind` "option", `id` the option's, `value` a value's id or a boolean); the
--- agent's new state comes back as a `modes` or `options` event, or an error.
---@param kind "mode"|"option"
---@param id string
---@param value? string|boolean
function M.choose(kind, id, value)
  wire.notify(wire.method.CHOOSE, { kind = kind, id = id, value = value })
end

--- Cancels the running turn.
function M.cancel()
  wire.notify(wire.method.CANCEL)
end

--- Cancels, then starts a fresh conversation (history and session grants forgotten).
function M.new()
  H.conversation().agent_commands = {}
  H.conversation().agent = "built-in"
  require("agent.choices").reset()
  if package.loaded["agent.approval"] then
    require("agent.approval").dismiss(H.conversation().id)
  end
  if package.loaded["agent.elicit"] then
    require("agent.elicit").dismiss(H.conversation().id)
  end
  wire.notify(wire.method.NEW)
end

--- Answers approval request `id`.
---@param id integer the request's id
---@param decision agent.Decision
---@param reason? string with "refuse": passed to the model
---@param option? string the external agent's option id, when it offered its own (ACP)
---@param text? string with "edited": the person's version of the proposal
---@param hunks? { dropped: integer[], count: integer } with "allow_once" on a diff: the hunks
--- the person dropped (from 0) and how many the preview showed; only the others are written
function M.decide(id, decision, reason, option, text, hunks)
  wire.notify(wire.method.DECIDE, {
    id = id,
    decision = decision,
    reason = reason,
    option = option,
    text = text,
    dropped = hunks and hunks.dropped,
    hunks = hunks and hunks.count,
  })
end

--- Answers an external agent's question `id` (ACP elicitation): `accept` with the form's values
--- by field name (none for a URL), `decline` or `cancel`.
---@param id integer
---@param action "accept"|"decline"|"cancel"
---@param content? table
function M.elicit_answer(id, action, content)
  wire.notify(wire.method.ELICIT_ANSWER, { question = id, action = action, content = content })
end

--- What the open approval `id` lets the person change ("Edit before allowing"): `{ kind = "file",
--- rel, now?, proposed }` or `{ kind = "command", command }`; nil and why once it was answered.
---@param id integer
---@return table? proposal
---@return string? err
function M.proposal(id)
  return wire.request(wire.request_name.PROPOSAL, { id = id })
end

--- Asks for the workspace's files matching `query` (what follows an `@`), best first, and calls
--- `done({ files, total, partial })` with them when they come, or `done(nil, why)`. Only the
--- latest query is answered: one asked before gets `done(nil, why)`. Nothing waits for the
--- backend (protocol.rs `method::FILES`).
---@param query string
---@param limit integer?
---@param done fun(found: { files: string[], total: integer, partial: boolean }?, err: string?)
function M.files(query, limit, done)
  H.files_seq = H.files_seq + 1
  local replaced = H.files_waiting
  local waiting = { seq = H.files_seq, done = done }
  H.files_waiting = waiting
  if replaced then
    -- Its caller (a completion plugin) is told, with nothing: it must not wait for ever.
    vim.schedule(function()
      replaced.done(nil, "replaced by a later query")
    end)
  end
  if not wire.notify(wire.method.FILES, { seq = waiting.seq, query = query, limit = limit }) then
    H.files_waiting = nil
    done(nil, "agent: the backend is not running")
  end
end

--- Called by Rust with the answer to the `files` query numbered `seq`: `done` runs once Neovim
--- is out of the backend's call, so it may open a menu.
---@param seq integer
---@param found table
function M.files_found(seq, found)
  local waiting = H.files_waiting
  if not waiting or waiting.seq ~= seq then
    return
  end
  H.files_waiting = nil
  vim.schedule(function()
    if type(found) ~= "table" or found.error then
      waiting.done(nil, tostring(type(found) == "table" and found.error or "a bad answer"))
    else
      waiting.done(found)
    end
  end)
end

--- What a prompt attaches, one answer per item (protocol.rs `request::ATTACH`): items are
--- `{ path }` (a file, read through the path check) or `{ label, text }`.
---@param items table[]
---@return table[]? answers
---@return string? err
function M.attach(items)
  -- Where the chat draws pictures, images are saved as they are attached, to draw them from.
  local preview = require("agent.chat.picture").viewer() ~= nil
  return wire.request(wire.request_name.ATTACH, { items = items, preview = preview or nil })
end

--- The connected external agent's own slash commands (`{ name, description, hint? }`), as it
--- last listed them; empty for the built-in agent.
---@return { name: string, description: string, hint?: string }[]
function M.agent_commands()
  return H.conversation().agent_commands
end

--- Ends conversation `id` in the backend (its turn stopped, its external agent ended).
---@param id integer
function M.close(id)
  job.close(id)
end

--- Called by Rust with the events of one frame, each conversation's together and in order.
--- Each is dispatched to its conversation's chat (and the approval picker), acting for that
--- conversation; a chat writes them to its buffer once, at the end of its part of the batch. An
--- event without `conversation` is the active one's; one for a conversation closed meanwhile is
--- dropped.
---@param events table[]
function M.receive(events)
  events = events or {}
  local conversations = require("agent.conversations")
  local first = 1
  while first <= #events do
    local id = events[first].conversation
    local last = first
    while events[last + 1] and events[last + 1].conversation == id do
      last = last + 1
    end
    local conversation = id == nil and conversations.active() or conversations.get(id)
    if conversation then
      conversations.acting(conversation.id, H.show, conversation, events, first, last)
    end
    first = last + 1
  end
end

--- What went wrong showing events since the last call, and forgets it: one line for each event
--- no handler knew and each error a handler raised (each error was also shown when it
--- happened). For tests, and a bug report.
---@return string[]
function M.problems()
  local problems = H.problems
  H.problems = {}
  return problems
end

-- Helpers ------------------------------------------------------------------------------------

H.problems = {}

-- The conversation acted for.
function H.conversation()
  return require("agent.conversations").active()
end

-- Shows events[first..last], all of `conversation`, in its chat.
function H.show(conversation, events, first, last)
  local chat = conversation.chat
  chat.begin_batch()
  for i = first, last do
    H.guarded(events[i], H.dispatch, events[i])
  end
  chat.end_batch()
end

-- Runs fn(...) for `event`; an error is shown, with what to do, and kept for M.problems().
function H.guarded(event, fn, ...)
  local ok, err = xpcall(fn, debug.traceback, ...)
  if not ok then
    local kind = tostring(type(event) == "table" and event.type)
    H.problems[#H.problems + 1] = ("`%s`: %s"):format(kind, err)
    vim.notify(
      ("agent: could not show a `%s` event (a bug; please report it with :Agent log): %s"):format(kind, err),
      vim.log.levels.ERROR
    )
  end
end

--- Shows what the backend says about the sandbox (no Landlock here, a rule this kernel cannot
--- enforce) as one warning, once per Neovim session: a backend started again says it again.
---@param warnings? string[]
--- The sandbox's warnings, once per Neovim, as notices in the chat (where the conversation that
--- started the backend is shown): a message of several lines at the bottom would stop the screen
--- at a hit-enter prompt while the first prompt waits.
function H.warn_about_sandbox(warnings)
  if H.sandbox_warned or type(warnings) ~= "table" or #warnings == 0 then
    return
  end
  H.sandbox_warned = true
  local chat = require("agent.chat")
  for _, warning in ipairs(warnings) do
    chat.handle({ type = "notice", text = tostring(warning) })
  end
end

function H.dispatch(event)
  local chat = require("agent.chat")
  local kind = event.type
  -- An inline edit's events are its buffer's, a side question's its float's: not the chat's.
  if type(kind) == "string" and kind:sub(1, 7) == "inline_" then
    require("agent.inline").on_event(event)
    return
  end
  if type(kind) == "string" and kind:sub(1, 4) == "btw_" then
    require("agent.side").on_event(event)
    return
  end
  if not chat.handle(event) then
    H.problems[#H.problems + 1] = ("`%s`: no handler"):format(tostring(kind))
  end
  if kind == "commands" then
    H.conversation().agent_commands = type(event.commands) == "table" and event.commands or {}
  end
  if kind == "acp_started" or kind == "modes" or kind == "options" or kind == "login" then
    require("agent.choices").on_event(event)
  end
  if kind == "started" then
    H.conversation().agent_commands = {}
    job.started(event)
    H.warn_about_sandbox(event.sandbox_warnings)
    if event.protocol ~= M.PROTOCOL then
      chat.error(
        ("agent: the backend speaks protocol %s but this plugin speaks %d; get the matching one with :Agent build (or `cargo build --release` in %s)"):format(
          tostring(event.protocol),
          M.PROTOCOL,
          paths.root()
        )
      )
      M.shutdown()
    end
  elseif kind == "turn_started" then
    H.fire("AgentTurnStart", {})
  elseif kind == "turn_done" then
    -- The turn is over: a question of it still open (or waiting) can no longer be answered.
    if package.loaded["agent.approval"] then
      require("agent.approval").dismiss(H.conversation().id)
    end
    H.fire("AgentTurnDone", {
      outcome = event.outcome,
      input = event.input,
      output = event.output,
      message = event.message,
    })
  elseif kind == "elicitation" then
    -- Out of the RPC request, as a question: the person answers in their own time.
    local conversation = H.conversation()
    event.conversation = conversation.id
    vim.schedule(function()
      if not require("agent.conversations").get(conversation.id) then
        return
      end
      H.guarded(event, function()
        -- The chat's row of the answer comes from the backend, once it has checked it.
        require("agent.elicit").ask(event, function(action, content)
          M.elicit_answer(event.id, action, content)
        end)
      end)
    end)
  elseif kind == "elicitation_closed" then
    vim.schedule(function()
      if package.loaded["agent.elicit"] then
        require("agent.elicit").close(event.id)
      end
    end)
  elseif kind == "approval" then
    H.fire("AgentApprovalRequest", event)
    -- Out of the RPC request: the picker waits for the user, the backend must not.
    local conversation = H.conversation()
    event.conversation = conversation.id
    vim.schedule(function()
      if not require("agent.conversations").get(conversation.id) then
        return -- closed meanwhile: its question ended with it
      end
      H.guarded(event, function()
        require("agent.approval").ask(event, function(decision, reason, option, text, hunks)
          M.decide(event.id, decision, reason, option, text, hunks)
        end, function()
          return M.proposal(event.id)
        end)
      end)
    end)
  end
end

function H.fire(pattern, data)
  local ok, err = pcall(vim.api.nvim_exec_autocmds, "User", { pattern = pattern, modeline = false, data = data })
  if not ok then
    vim.notify(("agent: a User %s autocommand failed: %s"):format(pattern, err), vim.log.levels.ERROR)
  end
end

return M
