--- agent.nvim: a coding agent in a Neovim split, run by the Rust backend `agent-nvim`.
---
--- Public API: setup(), ask(), open(), status(), stop(), new(), sessions(), resume(),
--- rewind_points(), rewind(), diff(). See :help agent.

local M = {}
local H = {}

--- Configures the plugin (optional: without it the defaults of :help agent-config apply).
--- Order: config, autocommands, highlights, keymaps. Raises on an invalid option, naming it.
---@param opts? agent.Config|table
function M.setup(opts)
  local config = require("agent.config")
  config.setup(opts)
  H.create_autocommands()
  H.define_highlights()
  H.apply_keymaps(config.options.keymaps)
end

--- Sends `prompt` to the agent, opening the conversation (without moving the cursor there).
--- Without a prompt, asks for a question with vim.ui.input about the current line, or about the
--- selection in Visual mode, and sends the question with that context.
--- `opts.context`: text sent after the prompt as it is, never read for `@` and `#` (the lines
--- the ask mapping adds).
---@param prompt? string
---@param opts? { context?: string }
---@return boolean sent false when nothing was sent (the reason was shown); true when it was
--- sent or queued behind the running turn
function M.ask(prompt, opts)
  if prompt == nil then
    local mode = vim.fn.mode()
    local context
    if mode == "v" or mode == "V" or mode == "\22" then
      local first, last = vim.fn.line("v"), vim.fn.line(".")
      vim.cmd("normal! \27")
      context = H.selection_context(math.min(first, last), math.max(first, last))
    else
      context = H.cursor_context()
    end
    H.ask_interactive(context)
    return false
  end
  if vim.trim(prompt) == "" then
    return false
  end
  H.ensure_init()
  local chat = require("agent.chat")
  local queue = chat.queue
  -- Behind the running turn, and behind prompts queued before it: sent in order, each when the
  -- backend is idle again (M.queue lists and removes them; :Agent stop may drop them).
  if chat.busy() or (#queue.items > 0 and not H.from_queue) then
    queue.push(prompt, opts and opts.context)
    if not chat.visible() then
      vim.notify(("agent: queued: %s"):format(queue.label(prompt)), vim.log.levels.INFO)
    end
    return true
  end
  local rpc = require("agent.rpc")
  if not rpc.ensure() then
    return false
  end
  -- `@path` and `#buffer`... attached (see :help agent-context); an external agent's own
  -- command goes as typed.
  local expanded = require("agent.slash").for_agent(prompt) and { text = prompt, attachments = {} }
    or require("agent.context").expand(prompt)
  local context = opts and opts.context
  local shown = context and (prompt .. "\n\n" .. context) or prompt
  chat.open({ focus = false })
  chat.user_prompt(shown, expanded.attachments, prompt)
  rpc.prompt(context and (expanded.text .. "\n\n" .. context) or expanded.text)
  return true
end

--- Opens the conversation split (chat above, input below), or focuses its input if it is open,
--- in Insert mode, ready to type. Starts the backend if it is not running, so its errors show at
--- once.
---@param opts? { focus?: boolean } focus: move the cursor to the input window (default true)
function M.open(opts)
  opts = opts or {}
  H.ensure_init()
  local focus = opts.focus ~= false
  require("agent.chat").open({ focus = focus, insert = focus })
  require("agent.rpc").ensure()
end

--- Cancels the running turn (the running command's process tree is killed). When prompts are
--- queued behind it, then asks whether to drop them or send them (nothing is sent from the
--- queue until the answer); `opts.queue` ("drop" or "keep") answers that without asking.
---@param opts? { queue?: "drop"|"keep" }
function M.stop(opts)
  opts = opts or {}
  local rpc = require("agent.rpc")
  local chat = require("agent.chat")
  local running = rpc.running() and chat.busy()
  local queued = #chat.queue.items
  if not running then
    vim.notify("agent: nothing is running", vim.log.levels.INFO)
    return
  end
  if queued == 0 then
    rpc.cancel()
    return
  end
  -- The turn stops now; the queue waits for the answer (an asynchronous vim.ui.select may
  -- answer after the turn has ended: nothing is sent from the queue meanwhile).
  local queue = chat.queue
  queue.held = true
  rpc.cancel()
  local function answered(answer)
    queue.held = false
    if answer == "drop" then
      local dropped = #queue.clear()
      vim.notify(("agent: stopped; dropped %d queued prompt%s"):format(dropped, dropped == 1 and "" or "s"))
    else
      H.send_queued()
    end
  end
  if opts.queue then
    answered(opts.queue)
    return
  end
  local plural = queued == 1 and "" or "s"
  local choices = {
    { answer = "drop", label = ("Stop, and drop the %d queued prompt%s"):format(queued, plural) },
    { answer = "keep", label = ("Stop, then send the %d queued prompt%s"):format(queued, plural) },
  }
  vim.ui.select(choices, {
    prompt = "agent: stopped; prompts are queued behind it",
    kind = "agent.stop",
    format_item = function(choice)
      return choice.label
    end,
  }, function(choice)
    -- No answer (<Esc>) keeps them: nothing is lost without saying so.
    answered(choice and choice.answer or "keep")
  end)
end

--- The prompts queued behind the running turn, oldest first (a copy). `queue(i)` removes the
--- i-th; `:Agent queue` lists them to remove one.
---@param remove? integer
---@return string[]
function M.queue(remove)
  local queue = require("agent.chat").queue
  if type(remove) == "number" then
    queue.remove(remove)
  end
  return vim.deepcopy(queue.items)
end

--- Starts a fresh conversation: cancels the running turn, forgets the history and the session's
--- approvals, and clears the chat. Prompts still queued go back into the input, not lost.
function M.new()
  local rpc = require("agent.rpc")
  local chat = require("agent.chat")
  local queued = chat.queue.clear()
  if rpc.running() then
    rpc.new()
  end
  chat.clear(rpc.running(), true)
  chat.queue.back_to_input(queued)
end

--- Chooses one of the connected external agent's modes (:Agent mode [ID]); without an id,
--- picks one with vim.ui.select. Remembered for this agent's next session. See
--- :help agent-acp-choices.
---@param id? string
function M.mode(id)
  require("agent.choices").mode(id)
end

--- Chooses a value of one of the external agent's config options (:Agent option [ID [VALUE]]);
--- what is left out is picked with vim.ui.select. See :help agent-acp-choices.
---@param id? string
---@param value? string
function M.option(id, value)
  require("agent.choices").option(id, value)
end

--- Switches the model the following prompts use (the running turn finishes on its own) and
--- shows it in the status line. Without `name`, picks one with vim.ui.select from setup()'s
--- `models`, the provider's models in the built-in table and, for Ollama, the models its server
--- lists. See :help agent-model.
---@param name? string
function M.model(name)
  local choices = require("agent.choices")
  if choices.connected() then
    choices.model(name)
    return
  end
  H.ensure_init()
  if not name or vim.trim(name) == "" then
    H.pick_model()
    return
  end
  local rpc = require("agent.rpc")
  if not rpc.ensure() then
    return
  end
  local model, err = rpc.model(vim.trim(name))
  if not model then
    local said = tostring(err)
    vim.notify(said:match("agent: .*") or ("agent: cannot switch the model: " .. said), vim.log.levels.ERROR)
    return
  end
  require("agent.chat").model_switched(model)
  vim.notify(("agent: the next prompts use %s"):format(model), vim.log.levels.INFO)
end

--- The models :Agent model offers: setup()'s `models`, the model in use and those the backend
--- reported (the provider's default, the model table's entries for the provider, and the
--- models an Ollama server listed when :Agent model asked), each once.
---@return string[]
function M.models()
  local seen, names = {}, {}
  local function add(name)
    if type(name) == "string" and name ~= "" and not seen[name] then
      seen[name] = true
      names[#names + 1] = name
    end
  end
  local configured = require("agent.config").options.models or {}
  for _, name in ipairs(configured) do
    add(name)
  end
  -- Models given settings by name are offered too, in a stable order.
  local named = vim.tbl_filter(function(key)
    return type(key) == "string"
  end, vim.tbl_keys(configured))
  table.sort(named)
  for _, name in ipairs(named) do
    add(name)
  end
  local chat = package.loaded["agent.chat"] and require("agent.chat")
  for _, name in ipairs(chat and chat.models_seen() or {}) do
    add(name)
  end
  add(require("agent.config").options.model)
  return names
end

function H.pick_model()
  local rpc = require("agent.rpc")
  if rpc.ensure() then
    local offer = rpc.models()
    if offer then
      require("agent.chat").offered(offer.models or {})
      if offer.problem then
        vim.notify(offer.problem, vim.log.levels.WARN)
      end
    end
  end
  local names = M.models()
  if #names == 0 then
    vim.notify(
      "agent: no models to choose from; name one (:Agent model NAME) or list them in setup({ models = { ... } })",
      vim.log.levels.INFO
    )
    return
  end
  local current = require("agent.chat").status().model
  vim.ui.select(names, {
    prompt = "agent: model for the next prompts",
    kind = "agent.model",
    format_item = function(name)
      return name == current and (name .. "  (in use)") or name
    end,
  }, function(name)
    if name then
      M.model(name)
    end
  end)
end

--- `:Agent queue`: the queued prompts in vim.ui.select; choosing one removes it.
function H.pick_queued()
  local items = M.queue()
  if #items == 0 then
    vim.notify("agent: no prompt is queued", vim.log.levels.INFO)
    return
  end
  local rows = {}
  for i, prompt in ipairs(items) do
    rows[i] = { index = i, prompt = prompt }
  end
  rows[#rows + 1] = { all = true }
  local queue = require("agent.chat").queue
  vim.ui.select(rows, {
    prompt = "agent: queued prompts (choose one to remove it)",
    kind = "agent.queue",
    format_item = function(row)
      return row.all and "Remove them all" or ("%d. %s"):format(row.index, queue.label(row.prompt, 70))
    end,
  }, function(row)
    if not row then
      return
    end
    -- The queue may have moved on while the list was open: remove by text, not by place.
    local removed = {}
    for i = #queue.items, 1, -1 do
      if row.all or (queue.items[i] == row.prompt and #removed == 0) then
        table.insert(removed, 1, queue.remove(i)) -- kept in the order they were queued
      end
    end
    queue.back_to_input(removed)
  end)
end

--- Sends the oldest queued prompt, once the backend has wholly ended the turn before it.
function H.send_queued()
  local chat = require("agent.chat")
  local queue = chat.queue
  if chat.busy() or queue.held or #queue.items == 0 then
    return
  end
  local prompt, context = queue.pop()
  H.from_queue = true
  local ok, sent = pcall(M.ask, prompt, { context = context })
  H.from_queue = false
  if not (ok and sent) then
    -- Not sent (no backend): back in the input, not lost.
    queue.back_to_input({ queue.whole(prompt, context) })
  end
  if not ok then
    error(sent, 0)
  end
end

--- This workspace's saved conversations, the most recent first (see :help agent-sessions).
--- Starts the backend if it is not running. Each is `{ id, title, updated, prompts, tokens,
--- problem? }`; one with a `problem` cannot be resumed. A running external agent's own sessions
--- are listed too, marked with its name: `{ id = "agent:{name}:{its id}", agent, session, title,
--- updated? }`. Nil (after saying why) when the backend cannot answer.
---@return agent.Session[]?
function M.sessions()
  H.ensure_init()
  local rpc = require("agent.rpc")
  if not rpc.ensure() then
    return nil
  end
  local list, err = rpc.sessions()
  if not list then
    vim.notify(("agent: cannot list the saved conversations: %s"):format(err), vim.log.levels.ERROR)
    return nil
  end
  return list
end

--- Compacts the conversation now: its older part is replaced, in what the model is sent, by a
--- summary the model writes; the latest `keep_turns` prompts stay as they are. The chat shows
--- it as a folded row. See :help agent-compact.
function M.compact()
  H.ensure_init()
  local rpc = require("agent.rpc")
  local chat = require("agent.chat")
  if not rpc.running() then
    vim.notify("agent: there is no conversation to compact yet", vim.log.levels.INFO)
    return
  end
  if chat.busy() then
    vim.notify("agent: the agent is working; :Agent compact once it is idle", vim.log.levels.WARN)
    return
  end
  M.open({ focus = false })
  chat.compacting()
  rpc.compact()
end

--- Lists the permission rules in force for this workspace with where each came from, in
--- vim.ui.select; choosing a saved one ("Allow always in this project") removes it. See
--- :help agent-permissions.
function M.permissions()
  H.ensure_init()
  local rpc = require("agent.rpc")
  if not rpc.ensure() then
    return
  end
  local answer, err = rpc.permissions()
  if not answer then
    vim.notify(("agent: cannot list the permission rules: %s"):format(err), vim.log.levels.ERROR)
    return
  end
  if answer.problem then
    vim.notify(("agent: the saved rules are not used: %s"):format(answer.problem), vim.log.levels.WARN)
  end
  local rows = answer.rules or {}
  if #rows == 0 then
    vim.notify(
      "agent: no permission rules for this workspace; add some in setup({ permissions = ... }) or answer a request with Always allow (see :help agent-permissions)",
      vim.log.levels.INFO
    )
    return
  end
  vim.ui.select(rows, {
    prompt = "agent: permission rules (choose a saved one to remove it)",
    kind = "agent.permissions",
    format_item = function(row)
      local origin = row.removable and "saved for this project · remove" or ("setup() · %s"):format(row.origin)
      return ("%s  (%s)"):format(row.rule, origin)
    end,
  }, function(row)
    if not row then
      return
    end
    if not row.removable then
      vim.notify(
        ("agent: %s is in setup({ permissions = ... }) (%s); change it there"):format(row.rule, row.origin),
        vim.log.levels.INFO
      )
      return
    end
    local removed, remove_err = rpc.permissions(row.raw)
    if not removed then
      vim.notify(("agent: cannot remove %s: %s"):format(row.rule, remove_err), vim.log.levels.ERROR)
      return
    end
    vim.notify(("agent: removed the saved rule %s for this project"):format(row.rule), vim.log.levels.INFO)
  end)
end

--- Continues saved conversation `id` with the built-in agent: the chat shows it as it looked, and
--- the next prompt goes on with its whole history. An `agent:{name}:{id}` from sessions() has the
--- running external agent load its own session instead. Without `id`, picks one with
--- vim.ui.select.
---@param id? string
function M.resume(id)
  if not id or id == "" then
    H.pick_session()
    return
  end
  H.ensure_init()
  local rpc = require("agent.rpc")
  local chat = require("agent.chat")
  if not rpc.ensure() then
    return
  end
  if package.loaded["agent.approval"] then
    require("agent.approval").dismiss_all()
  end
  local queued = chat.queue.clear()
  chat.clear(true)
  -- In the input, ready to type, as after :Agent: what is typed next goes to the agent (queued
  -- until the conversation is shown), never into the file that had focus.
  chat.open({ focus = true, insert = true })
  chat.queue.back_to_input(queued)
  chat.resuming()
  rpc.resume(id)
end

--- Lists what the agent changed in the quickfix list: the files changed since the start of the
--- last prompt (`opts.since = "all"`: since the conversation began; a prompt checkpoint's id, as
--- a chat `done` row passes: since that prompt began), each `A path +12 -0`. <CR> on an entry
--- opens its diff against the checkpoint (see :help agent-diff).
---@param opts? { since?: string }
---@return boolean listed false when nothing changed or nothing can be compared (the reason was shown)
function M.diff(opts)
  H.ensure_init()
  return require("agent.review").diff(opts)
end

--- How long ago `updated` (seconds since the epoch) was.
function H.age(updated)
  local secs = math.max(0, os.time() - (tonumber(updated) or 0))
  if secs < 60 then
    return "just now"
  elseif secs < 3600 then
    return ("%d min ago"):format(math.floor(secs / 60))
  elseif secs < 86400 then
    return ("%d h ago"):format(math.floor(secs / 3600))
  end
  local days = math.floor(secs / 86400)
  return days == 1 and "1 day ago" or ("%d days ago"):format(days)
end

--- One conversation as the picker shows it: title, age, prompts, tokens, after `{agent}: ` when
--- it is an external agent's session; one the agent listed itself as `{agent}: {title} · {age}`,
--- with what the agent gave of those.
---@param session agent.Session
---@return string
function H.session_item(session)
  local mark = session.agent and (session.agent .. ": ") or ""
  if session.agent and not session.prompts then
    local shown = session.problem or (session.title ~= "" and session.title or session.session or session.id)
    local age = (not session.problem and session.updated) and (" · " .. H.age(session.updated)) or ""
    return mark .. shown .. age
  end
  if session.problem then
    return ("%s (%s)"):format(session.id, session.problem)
  end
  local title = session.title ~= "" and session.title or session.id
  return mark
    .. ("%s · %s · %d prompt%s · %d tokens"):format(
      title,
      H.age(session.updated),
      session.prompts,
      session.prompts == 1 and "" or "s",
      session.tokens
    )
end

--- `:Agent resume` without an id: vim.ui.select over the workspace's conversations.
function H.pick_session()
  local list = M.sessions()
  if not list then
    return
  end
  if #list == 0 then
    vim.notify("agent: no saved conversation in this workspace", vim.log.levels.INFO)
    return
  end
  vim.ui.select(list, { prompt = "Resume a conversation", format_item = H.session_item }, function(choice)
    if not choice then
      return
    end
    if choice.problem then
      vim.notify(("agent: %s cannot be resumed: %s"):format(choice.id, choice.problem), vim.log.levels.ERROR)
      return
    end
    M.resume(choice.id)
  end)
end

--- The current conversation's prompts a rewind can go back to, the newest first (see :help
--- agent-rewind): each `{ turn, id, row }`, `row` being how :Agent rewind lists it. Starts the
--- backend if it is not running. Nil (after saying why) when there is nothing to rewind to.
---@return agent.RewindPoint[]?
function M.rewind_points()
  H.ensure_init()
  local rpc = require("agent.rpc")
  if not rpc.ensure() then
    return nil
  end
  local points, err = rpc.rewind_points()
  if not points then
    -- The backend's own message (it starts with `agent:`), without the RPC error's prefix.
    local said = tostring(err)
    vim.notify(said:match("agent: .*") or ("agent: cannot list the rewind points: " .. said), vim.log.levels.ERROR)
    return nil
  end
  return points
end

--- What a rewind can restore, in the order :Agent rewind offers them.
H.rewind_modes = {
  { label = "Code and conversation", mode = "both" },
  { label = "Code only", mode = "code" },
  { label = "Conversation only", mode = "conversation" },
}

--- Goes back to before prompt `n` of the current conversation (see :help agent-rewind): "code"
--- puts every file back as it was before it, "conversation" cuts the history there (the prompt's
--- text goes back in the input), "both" does both. Files with unsaved changes in Neovim block it
--- (nothing changes, and the message names them). `rewind("undo")` puts the code back as it was
--- before the last rewind. Without `n`, picks a prompt with vim.ui.select; without `mode`, asks
--- what to restore.
---@param n? integer|"undo" the prompt's number, as :Agent rewind lists it
---@param mode? "code"|"conversation"|"both"
function M.rewind(n, mode)
  if n == nil then
    H.pick_rewind()
    return
  end
  if n == "undo" then
    n, mode = 0, "undo"
  elseif type(n) ~= "number" or n < 1 or n % 1 ~= 0 then
    vim.notify(
      'agent: rewind needs a prompt number (1, 2, ...) as :Agent rewind lists them, or "undo"',
      vim.log.levels.ERROR
    )
    return
  end
  if mode == nil then
    H.pick_rewind_mode(n)
    return
  end
  if mode ~= "code" and mode ~= "conversation" and mode ~= "both" and mode ~= "undo" then
    vim.notify(
      ("agent: rewind's mode should be code, conversation or both, not %s"):format(vim.inspect(mode)),
      vim.log.levels.ERROR
    )
    return
  end
  H.ensure_init()
  if require("agent.chat").busy() then
    vim.notify("agent: a turn is running; wait for it or cancel it (:Agent stop) before rewinding", vim.log.levels.WARN)
    return
  end
  local rpc = require("agent.rpc")
  if not rpc.ensure() then
    return
  end
  if mode == "both" or mode == "conversation" then
    -- Where the cut shows, and the prompt comes back to.
    require("agent.chat").open({ focus = false })
  end
  rpc.rewind(n, mode)
end

--- `:Agent rewind` without a prompt: vim.ui.select over the rewind points, newest first.
function H.pick_rewind()
  local points = M.rewind_points()
  if not points then
    return
  end
  if #points == 0 then
    vim.notify("agent: no prompt to rewind to in this conversation yet", vim.log.levels.INFO)
    return
  end
  vim.ui.select(points, {
    prompt = "Rewind to before",
    format_item = function(point)
      return point.row
    end,
  }, function(choice)
    if choice and choice.undo then
      M.rewind("undo")
    elseif choice then
      H.pick_rewind_mode(choice.turn)
    end
  end)
end

--- Asks what a rewind to before prompt `n` restores, then does it.
function H.pick_rewind_mode(n)
  vim.ui.select(H.rewind_modes, {
    prompt = ("Rewind to before prompt %d: restore"):format(n),
    format_item = function(choice)
      return choice.label
    end,
  }, function(choice)
    if choice then
      M.rewind(n, choice.mode)
    end
  end)
end

---@class agent.Status
---@field state "off"|"idle"|"thinking"|"writing"|"running"|"approval"|"retrying"|"compacting"
---@field text string what the chat's winbar shows: "idle", "thinking", "running `cargo test` 12s", "waiting for approval"
---@field input integer input tokens of the current (or last) turn
---@field output integer output tokens of the current (or last) turn
---@field cached integer of `input`, those read from the provider's prompt cache
---@field cost? number what the conversation has cost in dollars; nil when a price is unknown
---@field provider? string
---@field model? string

--- A short status for a statusline: `agent: running cargo test 12s`, `agent: waiting for
--- approval`, `agent: idle · $0.42`, or "" when no conversation has started (or the plugin is
--- not loaded). Cheap enough for every redraw: no RPC, one string. See :help agent-statusline.
---@return string
function M.statusline()
  local status = package.loaded["agent.chat.status"]
  return status and status.line() or ""
end

--- The agent's state, for statuslines. See :help agent-statusline.
---@return agent.Status
function M.status()
  if not package.loaded["agent.chat"] then
    return { state = "off", text = "off", input = 0, output = 0, cached = 0 }
  end
  return require("agent.chat").status()
end

--- The names of the preset agents the backend knows: the one list, lua/agent/acp_presets.json,
--- which the backend reads too (src/acp/mod.rs).
---@return string[]
function H.acp_presets()
  if not H.presets then
    local path = require("agent.paths").acp_presets()
    local ok, list = pcall(function()
      return vim.json.decode(table.concat(vim.fn.readfile(path), "\n"))
    end)
    H.presets = {}
    for _, preset in ipairs(ok and type(list) == "table" and list or {}) do
      H.presets[#H.presets + 1] = preset.name
    end
  end
  return H.presets
end

--- Agent names for `:Agent acp`: configured ones, then the presets not overridden.
function H.acp_names()
  local agents = require("agent.config").options.acp.agents or {}
  local names = vim.tbl_keys(agents)
  for _, preset in ipairs(H.acp_presets()) do
    if agents[preset] == nil then
      names[#names + 1] = preset
    end
  end
  table.sort(names)
  return names
end

--- Drives an external agent over the Agent Client Protocol from the same chat and picker:
--- `name` is one from `setup({ acp = { agents = { name = { cmd = {...}, env = {...}, sandbox = true } } } })` or a
--- preset (lua/agent/acp_presets.json). Prompts go to it until |:Agent| new.
---@param name? string
function M.acp(name)
  H.ensure_init()
  if not name or name == "" then
    vim.notify("agent: :Agent acp needs an agent name: " .. table.concat(H.acp_names(), ", "), vim.log.levels.ERROR)
    return
  end
  local configured = (require("agent.config").options.acp.agents or {})[name]
  if not configured and not vim.tbl_contains(H.acp_presets(), name) then
    vim.notify(
      ("agent: no ACP agent named '%s'; use one of %s, or add it to setup({ acp = { agents = { ... } } })"):format(
        name,
        table.concat(H.acp_names(), ", ")
      ),
      vim.log.levels.ERROR
    )
    return
  end
  M.open({ focus = false })
  require("agent.rpc").acp(
    name,
    configured and configured.cmd,
    configured and configured.env,
    configured and configured.sandbox,
    configured and configured.directories
  )
end

--- What the ask mapping would send about the cursor now (tests, and to see it).
---@return string?
function M._context()
  local context = H.cursor_context()
  return context and context.text
end

--- Goes to the question waiting for an answer: shows it again when it was hidden (`<Esc>`),
--- gives it focus when it was shown beside what you typed (`:Agent approve`, `keymaps.approve`).
function M.approve()
  if not package.loaded["agent.approval"] then
    vim.notify("agent: no question is waiting")
    return
  end
  require("agent.approval").focus()
end

--- :Agent's implementation (plugin/agent.lua calls it).
---@param cmd table the argument of nvim_create_user_command's callback
function M._command(cmd)
  local args = vim.trim(cmd.args or "")
  local sub = H.subcommands[args]
  if sub then
    return sub()
  end
  local method = args:match("^build%s+(%S+)%s*$")
  if method then
    return require("agent.install").build({ method = method })
  end
  if args:match("^rewind%s+undo$") then
    return M.rewind("undo")
  end
  if args == "rewind" then
    return M.rewind()
  end
  local turn, mode = args:match("^rewind%s+(%d+)%s*(%a*)$")
  if turn then
    return M.rewind(tonumber(turn), mode ~= "" and mode or nil)
  end
  if args:match("^rewind%s") then
    vim.notify("agent: use :Agent rewind [{n} [both|code|conversation]] or :Agent rewind undo", vim.log.levels.ERROR)
    return
  end
  local resume_id = args:match("^resume%s*(%S*)%s*$")
  if resume_id then
    return M.resume(resume_id)
  end
  local since = args:match("^diff%s*(%S*)%s*$")
  if since then
    if since ~= "" and since ~= "all" then
      vim.notify(("agent: :Agent diff takes nothing or `all`, not `%s`"):format(since), vim.log.levels.ERROR)
      return
    end
    return M.diff({ since = since == "all" and "all" or "prompt" })
  end
  local model = args:match("^model%s+(.-)%s*$")
  if model then
    return M.model(model)
  end
  local login = args:match("^login%s+(%S+)%s*$")
  if login then
    return require("agent.choices").login(login, M.acp)
  end
  local mode = args:match("^mode%s+(%S+)%s*$")
  if mode then
    return M.mode(mode)
  end
  local option, value = args:match("^option%s+(%S+)%s*(%S*)%s*$")
  if option then
    return M.option(option, value ~= "" and value or nil)
  end
  local acp_name = args:match("^acp%s+(%S+)%s*$")
  if acp_name or args == "acp" then
    return M.acp(acp_name)
  end
  if cmd.range and cmd.range > 0 then
    local context = H.selection_context(cmd.line1, cmd.line2)
    if args == "" then
      return H.ask_interactive(context)
    end
    return M.ask(args, { context = context and context.text })
  end
  if args == "" then
    return M.open()
  end
  M.ask(args)
end

--- :Agent's completion: the subcommands, for the first argument only.
---@param arglead string
---@param cmdline string
---@return string[]
function M._complete(arglead, cmdline)
  local rest = cmdline:match("Agent!?%s+(.*)$") or ""
  if rest:match("^build%s+%S*$") then
    return vim.tbl_filter(function(name)
      return vim.startswith(name, arglead)
    end, { "cargo", "download" })
  end
  if rest:match("^acp%s+%S*$") then
    return vim.tbl_filter(function(name)
      return vim.startswith(name, arglead)
    end, H.acp_names())
  end
  if rest:match("^resume%s+%S*$") then
    -- Only from a running backend, as for rewind: completing must not start one. Only the ids
    -- of our own files: listing them whole reads every file, and asks an external agent.
    local rpc = require("agent.rpc")
    local ids = rpc.running() and rpc.session_ids() or {}
    return vim.tbl_filter(function(id)
      return type(id) == "string" and vim.startswith(id, arglead)
    end, ids)
  end
  if rest:match("^model%s+%S*$") then
    local choices = require("agent.choices")
    local names = choices.connected() and choices.model_option() and choices.complete("model") or M.models()
    return vim.tbl_filter(function(name)
      return vim.startswith(name, arglead)
    end, names)
  end
  local choices = require("agent.choices")
  local listed = rest:match("^login%s+%S*$") and choices.complete("login")
    or rest:match("^mode%s+%S*$") and choices.complete("mode")
    or rest:match("^option%s+%S*$") and choices.complete("option")
    or rest:match("^option%s+(%S+)%s+%S*$") and choices.complete("value", rest:match("^option%s+(%S+)"))
  if listed then
    return vim.tbl_filter(function(name)
      return vim.startswith(name, arglead)
    end, listed)
  end
  if rest:match("^diff%s+%S*$") then
    return vim.startswith("all", arglead) and { "all" } or {}
  end
  local candidates
  if rest:match("^rewind%s+%S*$") then
    -- Only from a running backend: completing must not start one.
    local rpc = require("agent.rpc")
    local points = rpc.running() and rpc.rewind_points() or {}
    candidates = vim.tbl_map(function(point)
      return point.undo and "undo" or tostring(point.turn)
    end, points)
  elseif rest:match("^rewind%s+%d+%s+%S*$") then
    candidates = { "both", "code", "conversation" }
  end
  if candidates then
    return vim.tbl_filter(function(name)
      return vim.startswith(name, arglead)
    end, candidates)
  end
  if rest:find("%s") then
    return {}
  end
  local names = vim.tbl_keys(H.subcommands)
  table.insert(names, "acp")
  table.insert(names, "resume")
  table.insert(names, "rewind")
  table.insert(names, "diff")
  table.sort(names)
  return vim.tbl_filter(function(name)
    return vim.startswith(name, arglead)
  end, names)
end

-- Helpers ------------------------------------------------------------------------------------

H.subcommands = {
  approve = function()
    M.approve()
  end,
  build = function()
    require("agent.install").build()
  end,
  stop = function()
    M.stop()
  end,
  new = function()
    M.new()
  end,
  permissions = function()
    M.permissions()
  end,
  compact = function()
    M.compact()
  end,
  follow = function()
    require("agent.follow").toggle()
  end,
  model = function()
    M.model()
  end,
  mode = function()
    M.mode()
  end,
  login = function()
    require("agent.choices").login(nil, M.acp)
  end,
  logout = function()
    require("agent.choices").logout()
  end,
  option = function()
    M.option()
  end,
  queue = function()
    H.pick_queued()
  end,
  log = function()
    local path = require("agent.rpc").logfile()
    if not vim.uv.fs_stat(path) then
      vim.notify(
        ("agent: no log yet at %s; the backend writes it once it starts (:Agent)"):format(path),
        vim.log.levels.INFO
      )
      return
    end
    require("agent.chat").leave()
    vim.cmd.edit(vim.fn.fnameescape(path))
    -- Read again if it was open (the backend has written since), and at its newest line.
    pcall(vim.cmd.checktime, vim.api.nvim_get_current_buf())
    vim.api.nvim_win_set_cursor(0, { vim.api.nvim_buf_line_count(0), 0 })
  end,
}

-- Highlight groups: links to built-ins, `default` so a colorscheme or the user can override them.
H.highlights = {
  AgentHeader = "Title", -- an external agent's `Plan`
  AgentUserHeader = "Title", -- `## You`
  AgentAgentHeader = "Function", -- `## Agent`
  AgentToolRow = "Special", -- `▸ read src/a.rs (120 chars)`
  AgentToolRunning = "DiagnosticWarn", -- `… running run_bash (3s)`
  AgentToolFailed = "DiagnosticError", -- `✗ $ cargo test -> exit 124`: a failed result
  AgentToolError = "AgentToolFailed", -- the older name of AgentToolFailed
  AgentToolExit = "DiagnosticWarn", -- `▸ $ cargo test -> exit 101`: a command that exited non-zero
  AgentToolOutput = "Comment", -- a tool's output, below its row (folded)
  AgentAttachment = "Special", -- `@ src/calc.py (116 chars)` under a prompt (its text folded)
  AgentNotice = "Comment", -- `done · 10 in / 20 out tokens`, retries, approval decisions
  AgentError = "DiagnosticError", -- an error from the backend
  AgentInputHint = "Comment", -- the hint in the empty input window
  AgentThought = "Comment", -- an external agent's thinking (ACP), folded
  AgentRewound = "Comment", -- `rewound to before prompt 3: ...` and the turns folded under it
  AgentDiffAdd = "DiffAdd", -- `+` lines in the approval preview
  AgentDiffDelete = "DiffDelete", -- `-` lines
  AgentDiffHeader = "DiffChange", -- `---`, `+++` and `@@` lines
  AgentApprovalTitle = "FloatTitle", -- the picker's title (what is about to happen)
  AgentApprovalKey = "Special", -- the keys beside each choice
  AgentApprovalSelected = "PmenuSel", -- the highlighted choice
  AgentFollowed = "IncSearch", -- follow mode: the lines an edit changed, for a moment
}

function H.define_highlights()
  for group, link in pairs(H.highlights) do
    vim.api.nvim_set_hl(0, group, { link = link, default = true })
  end
end

function H.create_autocommands()
  local group = vim.api.nvim_create_augroup("agent", { clear = true })
  -- Where the focus is, for the notice when a turn ends unseen (|agent-notify|).
  require("agent.notice").watch()
  -- When a key was last typed: a question does not take the focus of a person typing.
  require("agent.keys").watch()
  -- Which buffers hold a file on disk: one deleted later is said once, not E211 at each check.
  require("agent.rpc.buffers").watch()
  vim.api.nvim_create_autocmd("WinEnter", {
    group = group,
    desc = "agent: the last window you were in, where follow mode opens files (:help agent-follow)",
    callback = function()
      require("agent.follow").entered(vim.api.nvim_get_current_win())
    end,
  })
  vim.api.nvim_create_autocmd("ColorScheme", {
    group = group,
    desc = "agent: re-apply highlight links",
    callback = H.define_highlights,
  })
end

-- Autocommands and highlights also without setup(), and what the chat's keys do (the chat
-- never requires this module): done once, on first use.
function H.ensure_init()
  if H.initialized then
    return
  end
  H.initialized = true
  local chat = require("agent.chat")
  chat.set_actions({
    submit = function(text)
      -- `/new`, `/diff`... run here (see :help agent-slash); anything else is a prompt.
      local handled, refused = require("agent.slash").run(text, M)
      if refused then
        return false -- an unknown `/word`: the input keeps it
      end
      return handled or M.ask(text)
    end,
    cancel = function()
      M.stop()
    end,
    approve = function()
      M.approve()
    end,
    review = function(checkpoint)
      M.diff({ since = checkpoint })
    end,
    idle = function()
      H.send_queued()
    end,
  })
  chat.on_input(function(buf)
    require("agent.context").setup_input(buf)
  end)
  if not require("agent.config").did_setup then
    H.create_autocommands()
    H.define_highlights()
  end
end

-- The keys mapped by the last setup() call, removed when setup() runs again.
H.mapped = {}

function H.apply_keymaps(keymaps)
  local plug = "<Plug>(agent-ask)"
  for _, map in ipairs(H.mapped) do
    pcall(vim.api.nvim_del_keymap, map[1], map[2])
  end
  H.mapped = {}
  for _, mode in ipairs({ "n", "x" }) do
    -- The default key plugin/agent.lua may have mapped before setup() ran.
    local existing = vim.fn.maparg("<leader>aa", mode, false, true)
    if type(existing) == "table" and existing.rhs == plug then
      pcall(vim.api.nvim_del_keymap, mode, "<leader>aa")
    end
    if keymaps.ask then
      vim.api.nvim_set_keymap(mode, keymaps.ask, plug, { desc = "agent: ask" })
      H.mapped[#H.mapped + 1] = { mode, keymaps.ask }
    end
  end
end

-- The workspace-relative path of buffer `buf`, or nil for a buffer that is not a file.
function H.buffer_path(buf)
  if vim.bo[buf].buftype ~= "" then
    return nil
  end
  local name = vim.api.nvim_buf_get_name(buf)
  if name == "" then
    return nil
  end
  local file = vim.fs.normalize(vim.fn.fnamemodify(name, ":p"))
  local root = vim.fs.normalize(require("agent.rpc").workspace())
  local paths = require("agent.paths")
  for _, pair in ipairs({ { file, root }, { vim.uv.fs_realpath(file), vim.uv.fs_realpath(root) } }) do
    local f, r = pair[1], pair[2]
    local relative = f and r and paths.within(f, r)
    if relative then
      return relative
    end
  end
  return file
end

--- The most of the current buffer's text an ask sends, as read_file's clamp.
H.CONTEXT_CHARS = 20000

--- What the ask mapping sends about the cursor: the path, the line's number, and the line with
--- `ask.context_lines` lines before and after it (clamped to the buffer), numbered. The
--- buffer's text as it is in Neovim, saved or not. The cursor line comes first in the budget:
--- long lines around it are dropped before it is.
---@return { text: string, label: string }?
function H.cursor_context()
  local path = H.buffer_path(0)
  if not path then
    return nil
  end
  local line = vim.fn.line(".")
  local around = require("agent.config").options.ask.context_lines
  local count = vim.api.nvim_buf_line_count(0)
  -- The cursor line, then one above and one below in turn, while the budget lasts.
  local order = { line }
  for d = 1, around do
    if line - d >= 1 then
      order[#order + 1] = line - d
    end
    if line + d <= count then
      order[#order + 1] = line + d
    end
  end
  local taken, first, last, cut = H.take_lines(order)
  local what = first == last and ("line %d"):format(line) or ("lines %d-%d, around line %d,"):format(first, last, line)
  return {
    label = ("line %d of %s"):format(line, path),
    text = ("(I am in %s, at line %d.)\n%s"):format(path, line, H.fenced(path, what, taken, first, last, cut)),
  }
end

---@return { text: string, label: string }?
function H.selection_context(first, last)
  local path = H.buffer_path(0)
  if not path then
    return nil
  end
  local order = {}
  for n = first, last do
    order[#order + 1] = n
  end
  local taken, from, to, cut = H.take_lines(order)
  local what = first == last and ("line %d"):format(first) or ("lines %d-%d"):format(first, last)
  return {
    label = ("%s of %s"):format(what, path),
    text = "Selected " .. H.fenced(path, what, taken, from, to, cut),
  }
end

--- Reads the current buffer's lines numbered in `order` (the first is kept whatever it costs,
--- cut to the budget), each as `12: text`, until H.CONTEXT_CHARS characters are used. Returns
--- them by number, the first and last number taken (a contiguous run), and whether anything
--- was left out.
---@param order integer[]
---@return table<integer, string> taken
---@return integer first
---@return integer last
---@return boolean cut
function H.take_lines(order)
  local taken, left = {}, H.CONTEXT_CHARS
  local first, last = order[1], order[1]
  local cut = false
  for _, n in ipairs(order) do
    if left <= 0 then
      cut = true
      break
    end
    local text = ("%d: %s"):format(n, vim.api.nvim_buf_get_lines(0, n - 1, n, false)[1] or "")
    local chars = vim.fn.strchars(text) + 1
    if chars > left then
      text = vim.fn.strcharpart(text, 0, math.max(0, left - 1))
      cut = true
    end
    taken[n] = text
    left = left - chars
    first, last = math.min(first, n), math.max(last, n)
  end
  -- A line left out in the middle would leave a gap: keep the run from the first line on.
  for n = first, last do
    if not taken[n] then
      last = n - 1
      break
    end
  end
  return taken, first, last, cut
end

--- `{what} of {path}:` and the `taken` lines `first`..`last` in a fence longer than any backtick
--- run inside, with read_file's marker when the budget cut them.
function H.fenced(path, what, taken, first, last, cut)
  local lines, longest = {}, 0
  for n = first, last do
    local text = taken[n]
    for ticks in text:gmatch("`+") do
      longest = math.max(longest, #ticks)
    end
    lines[#lines + 1] = text
  end
  if cut then
    lines[#lines + 1] = ("[... truncated at %d chars]"):format(H.CONTEXT_CHARS)
  end
  local fence = string.rep("`", math.max(3, longest + 1))
  return ("%s of %s:\n%s%s\n%s\n%s"):format(what, path, fence, vim.bo.filetype, table.concat(lines, "\n"), fence)
end

function H.ask_interactive(context)
  local prompt = context and ("agent: ask about %s: "):format(context.label) or "agent: ask: "
  vim.ui.input({ prompt = prompt }, function(question)
    if not question or vim.trim(question) == "" then
      return
    end
    -- Only the person's words are read for `@` and `#`: the file's lines that follow are the
    -- repository's, and could name files or buffers the person never chose.
    M.ask(question, { context = context and context.text })
  end)
end

return M
