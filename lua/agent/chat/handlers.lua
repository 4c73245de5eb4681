--- What each event from the backend does to the chat and its state (the events are declared in
--- src/front/nvim/protocol.rs, UiEvent; every string in them was made visible by the backend, and an
--- absent field is nil).

-- One copy per conversation (lua/agent/conversations.lua loads it, with the conversation's
-- number); required by name elsewhere, a stand-in for the copy of the conversation acted for.
if type(({ ... })[2]) ~= "number" then
  return require("agent.conversations").stand_in(...)
end

local render = require("agent.chat.render")
local status = require("agent.chat.status")
local window = require("agent.chat.window")

local M = {}
local H = {}

--- One handler for each event type the backend sends.
---@type table<string, fun(event: table)>
M.handlers = {}

H.running_tool = nil ---@type string? the id of the tool call running now
H.draining = false -- after `:Agent new` during a turn: skip that turn's last events
H.last_error = nil ---@type string? the last error shown in this turn (a failed turn ends with it)
H.done = nil ---@type table? the last turn's `done` row, until the next turn starts
H.done_count = 0
H.later = {} ---@type table<integer, table> resumed rows whose output is still to come, by `later`
H.attachment_count = 0
H.fresh = true -- a new conversation with nothing shown yet: `started` writes its first line
H.ns_branches = vim.api.nvim_create_namespace("agent.chat.branches")
H.typed = nil ---@type string? the running turn's prompt as typed, put back in the input if it fails
H.branch_typed = nil ---@type string? a prompt sent as a new branch, as typed, until the redraw ends
H.next_typed = nil ---@type string? then: the `typed` of the next prompt drawn (that one)
H.redrawing = false -- between `clear` and `branches`: the rows are a branch's, replayed

--- The models the backend reported (`started`) or was switched to, each once, in order.
---@type string[]
M.models = {}

--- Notes that `model` was in use (for :Agent model's list).
---@param model? string
function M.saw_model(model)
  if model and model ~= "" and not vim.tbl_contains(M.models, model) then
    M.models[#M.models + 1] = model
  end
end

--- Called (scheduled) when the backend has wholly ended a prompt's turn and takes the next
--- (`idle`): the chat's owner sends the next queued prompt from it.
---@type fun()?
M.on_idle = nil

--- The current branch's prompts that have others (the last `branches` event): `{ turn, index,
--- count }` each.
---@type { turn: integer, index: integer, count: integer }[]
M.branch_marks = {}

--- Shows one event. Returns false when no handler knows its type.
---@param event table
---@return boolean handled
function M.handle(event)
  render.ensure()
  local kind = event.type
  if H.draining then
    if kind == "turn_done" or kind == "turn_started" then
      H.draining = false
    end
    if kind ~= "turn_started" and kind ~= "started" and kind ~= "error" then
      return M.handlers[kind] ~= nil
    end
  end
  local handler = M.handlers[kind]
  render.end_block(kind)
  if handler then
    handler(event)
  end
  render.write()
  return handler ~= nil
end

--- Shows an error (highlighted) in the chat, and through vim.notify when the chat is not
--- visible.
---@param message string
function M.error(message)
  H.last_error = message
  render.ensure()
  render.newline()
  render.put(message, "AgentError")
  render.put("\n")
  render.write()
  local state = status.current.state
  if
    not status.current.turn
    and (state == "thinking" or state == "writing" or state == "compacting" or state == "retrying")
  then
    -- The prompt (or :Agent compact) failed before a turn began: no turn_done will come.
    status.set("idle")
  end
  if not window.visible() then
    vim.notify(message, vim.log.levels.ERROR)
  end
end

--- The first line of a new conversation: the provider and model it will use (or why there is
--- none, and what to set), and `?` for the keys.
function M.intro()
  H.fresh = false
  local s = status.current
  local line, hl
  if s.unavailable then
    line, hl = s.unavailable, "AgentNotice"
  elseif s.provider then
    line, hl = ("new conversation with %s · %s"):format(s.provider, tostring(s.model)), "AgentNotice"
  else
    return
  end
  if s.worktree then
    -- Where its files are: a worktree of its own, on its own branch.
    line = ("%s · worktree %s in %s"):format(line, s.worktree, tostring(s.workspace))
  end
  render.ensure()
  render.blank_line()
  render.put(line .. " · ? for keys", hl)
  render.put("\n")
  render.write()
end

--- Shows the user's prompt under `## You`, each attachment a row under it with its text folded
--- below (`@ src/calc.py (116 chars)`); the state becomes `thinking`.
---@param prompt string
---@param attachments? agent.Attachment[]
---@param typed? string the prompt as the person typed it (put back in the input if the turn fails)
function M.user_prompt(prompt, attachments, typed)
  H.fresh = false
  H.typed = typed or H.next_typed
  H.next_typed = nil
  require("agent.notice").prompted(prompt)
  render.ensure()
  render.blank_line()
  render.put("## You", "AgentUserHeader")
  render.put("\n\n")
  render.put(prompt)
  render.newline()
  -- This prompt's image rows, in order: a resumed one's pictures are drawn under them.
  H.image_rows = {}
  for _, attachment in ipairs(attachments or {}) do
    H.attachment_count = H.attachment_count + 1
    local id = ("attachment-%d"):format(H.attachment_count)
    if attachment.image then
      H.image_rows[#H.image_rows + 1] = id
    end
    local row = attachment.row
    local hl = attachment.problem and "AgentToolError" or "AgentAttachment"
    render.tools[id] = { name = "attachment" }
    render.put(row, hl, id)
    render.put("\n")
    render.flush()
    local tool = render.tools[id]
    local at = render.row_of(tool)
    if at and attachment.shown then
      render.write_row(tool, at, row, hl, render.indented(attachment.shown))
    end
    if at and attachment.file then
      require("agent.chat.picture").show(require("agent.chat.window").buf, at, attachment.file)
    end
  end
  render.write()
  status.current.input, status.current.output, status.current.cached = 0, 0, 0
  status.current.turn = false
  status.set("thinking")
end

--- Forgets the running turn's rows; what is left of a turn still running (the backend cancels
--- it) is not shown. `fresh`: a new conversation follows (its first line is written once the
--- backend has said what it uses).
---@param fresh? boolean
function M.clear(fresh)
  H.fresh = fresh == true
  H.typed = nil
  require("agent.chat.picture").clear()
  -- Text edited from a prompt of what is cleared is not that prompt's any more: sent, it is
  -- a prompt of its own.
  window.take_editing()
  H.draining = status.current.turn
  H.running_tool = nil
  H.stop_clock()
  H.done = nil
  H.later = {}
end

--- The checkpoint whose changes the row at `row` (0-based) offers, if it offers any: a `done`
--- row's, or an agent's changes made by itself (then with the row, whose `outside` lists those
--- files).
---@param row integer
---@return string? checkpoint
---@return table? row
function M.checkpoint_at(row)
  for _, tool in pairs(render.tools) do
    if tool.checkpoint and render.row_of(tool) == row then
      return tool.checkpoint, tool.outside and tool or nil
    end
  end
  return nil, nil
end

--- The finished tool row whose line (or open output) is at `row` (0-based), and its whole
--- output as the model read it (nil when it had none).
---@param row integer
---@return table? tool
---@return string? output
function M.output_at(row)
  for _, tool in pairs(render.tools) do
    local at = tool.ok ~= nil and render.row_of(tool)
    if at and row >= at and row <= at + (tool.lines or 0) then
      return tool, tool.output
    end
  end
  return nil, nil
end

-- Handlers -----------------------------------------------------------------------------------

local handlers = M.handlers

-- An external agent (ACP) is connected: prompts go to it until :Agent new.
function handlers.acp_started(e)
  -- (What the previous agent showed was cleared when this one was asked for: agent.choices.)
  status.current.model = tostring(e.name)
  render.blank_line()
  render.put(("connected to %s (ACP); prompts go to it until :Agent new"):format(tostring(e.name)), "AgentNotice")
  render.put("\n")
  status.render()
end

function handlers.started(e)
  local s = status.current
  s.workspace = e.workspace ~= "" and e.workspace or nil
  s.provider = e.provider ~= "" and e.provider or nil
  s.model = e.model ~= "" and e.model or nil
  s.base_url = e.base_url ~= "" and e.base_url or nil
  s.unavailable = e.unavailable
  s.worktree = e.worktree
  M.saw_model(s.model)
  M.saw_model(e.default_model)
  for _, model in ipairs(type(e.models) == "table" and e.models or {}) do
    M.saw_model(model)
  end
  if s.state == "off" then
    s.state = "idle"
  end
  if H.fresh then
    M.intro()
  end
  status.render()
end

-- The chat is drawn again (a branch switched to, :help agent-branches): what it shows goes;
-- the branch's rows follow, then `branches`.
function handlers.clear()
  -- Whatever the chat showed running, nothing is now: the branch's rows follow, and what they
  -- leave open (a turn cut off by a crash) is closed by `branches` at their end.
  status.current.turn = false
  M.clear(false)
  H.draining = false
  H.redrawing = true
  render.clear()
end

-- The prompts of the current branch that have other branches: each `## You` header gets
-- `branch 2 of 3 · [ / ]` at its end (the keys that switch); the marks before go.
function handlers.branches(e)
  local buf = window.buf
  vim.api.nvim_buf_clear_namespace(buf, H.ns_branches, 0, -1)
  render.commit()
  local prompts = H.prompt_marks()
  local keys = require("agent.config").options.keymaps.chat
  local hint = (keys.branch_prev and keys.branch_next) and (" · %s / %s"):format(keys.branch_prev, keys.branch_next)
    or ""
  for _, at in ipairs(type(e.at) == "table" and e.at or {}) do
    local mark = prompts[tonumber(at.turn) or 0]
    if mark then
      vim.api.nvim_buf_set_extmark(buf, H.ns_branches, mark[2], 0, {
        virt_text = { { ("  branch %d of %d%s"):format(at.index, at.count, hint), "AgentBranch" } },
        virt_text_pos = "eol",
      })
    end
  end
  M.branch_marks = e.at
  -- The redraw before a branch's prompt is over: that prompt, drawn next, is the one typed.
  H.next_typed, H.branch_typed = H.branch_typed, nil
  H.redrawing = false
  -- The end of a redraw, or of a turn: nothing runs (a branch's prompt about to go is drawn
  -- after this, and makes the chat busy again).
  status.current.turn = false
  if status.busy() and not status.current.resuming then
    status.set("idle")
  end
end

-- A prompt of a resumed conversation, shown as it was sent: its attachments as rows again.
function handlers.prompt(e)
  M.user_prompt(require("agent.context.format").parse(tostring(e.text or "")))
end

-- The saved images of the resumed prompt just shown, one for each of its image rows ("" for
-- one not drawn): each a picture under its row, where the chat can draw pictures.
function handlers.pictures(e)
  local files = type(e.files) == "table" and e.files or {}
  local buf = require("agent.chat.window").buf
  for i, file in ipairs(files) do
    local tool = render.tools[(H.image_rows or {})[i] or ""]
    local at = tool and render.row_of(tool)
    if at and type(file) == "string" and file ~= "" then
      require("agent.chat.picture").show(buf, at, file)
    end
  end
end

-- An external agent's own slash commands: kept by agent.rpc (for completion), nothing to show.
function handlers.commands() end

-- An external agent's modes: the current one's name in the winbar (agent.choices keeps the
-- list, for :Agent mode).
function handlers.modes(e)
  if not require("agent.choices").mode_option() then
    local name
    for _, mode in ipairs(type(e.modes) == "table" and e.modes or {}) do
      if mode.id == e.current then
        name = mode.name
      end
    end
    status.current.mode = name or (e.current and tostring(e.current))
  end
  status.render()
end

-- An external agent's config options: the chosen model's and mode's names in the winbar.
function handlers.options(e)
  local choices = require("agent.choices")
  for _, option in ipairs(type(e.options) == "table" and e.options or {}) do
    if choices.is_model(option) then
      status.current.agent_model = choices.value_name(option)
    elseif option.category == "mode" then
      status.current.mode = choices.value_name(option)
    end
  end
  status.render()
end

-- How full an external agent's context is, and its session's cost (usage_update).
function handlers.context_usage(e)
  status.current.context = { used = tonumber(e.used) or 0, size = tonumber(e.size) or 0 }
  if type(e.cost) == "table" then
    status.current.agent_cost = { amount = tonumber(e.cost.amount) or 0, currency = tostring(e.cost.currency) }
  end
  status.render()
end

-- An external agent wants a login (its ways to log in listed, :Agent login picks one), or has
-- logged in or out.
function handlers.login(e)
  render.blank_line()
  render.put(tostring(e.message or ""), e.needed and "AgentError" or "AgentNotice")
  render.put("\n")
  if e.needed then
    for _, method in ipairs(type(e.methods) == "table" and e.methods or {}) do
      local how = method.terminal and "in a terminal" or "by the agent"
      render.put(("  %s (%s, %s)"):format(tostring(method.name), tostring(method.id), how), "AgentNotice")
      render.put("\n")
    end
  end
end

-- The conversation's title, as an external agent names it (session_info_update).
function handlers.title(e)
  status.current.title = e.title ~= vim.NIL and e.title and tostring(e.title) or nil
  status.render()
end

-- A resumed conversation has been shown whole: the next prompt continues it.
function handlers.resumed(e)
  local s = status.current
  s.prompted = true -- a conversation again: the statusline speaks
  s.turn, s.tool, s.command = false, nil, nil
  H.running_tool = nil
  render.blank_line()
  render.put(("resumed: %s"):format(tostring(e.title or e.id or "")), "AgentNotice")
  render.put("\n")
  status.set("idle")
end

-- A rewind of the code would undo what other conversations changed since: nothing was done
-- yet; the person is asked (what the chat's owner handed in, `rewind_others`), out of the batch.
function handlers.rewind_ask(e)
  vim.schedule(function()
    if window.actions.rewind_others then
      window.actions.rewind_others(e)
    end
  end)
end

-- A rewind was done. When it cut the conversation (`cut`; a resumed conversation's replay sends
-- this too), the turns from that prompt on are folded closed under a dimmed row saying so, and
-- their `## You` headers are dimmed as well: the prompts of the history are the `## You` headers
-- still highlighted as such (AgentUserHeader), so prompt `turn` is the turn-th of those. `prompt` (the cut prompt's
-- text) goes back in the input; `message` (what was done) is said with vim.notify.
function handlers.rewound(e)
  local buf = window.buf
  local ns = vim.api.nvim_create_namespace("agent.chat")
  render.newline()
  render.commit() -- the buffer is read back below
  local prompts = e.cut and H.prompt_marks() or {}
  local first = prompts[tonumber(e.turn) or 0]
  if first then
    for i = e.turn, #prompts do
      local id, row, col, details = unpack(prompts[i])
      vim.api.nvim_buf_set_extmark(buf, ns, row, col, {
        id = id,
        end_row = details.end_row,
        end_col = details.end_col,
        hl_group = "AgentRewound",
      })
    end
    local row = first[2]
    -- The text ends with an empty line (render.newline above), which stays out of the fold so
    -- that what comes next is not written inside it.
    local cut_lines = vim.api.nvim_buf_line_count(buf) - 1 - row
    local title = ("rewound to before prompt %d: the model no longer sees what follows"):format(e.turn)
    vim.bo[buf].modifiable = true
    vim.api.nvim_buf_set_lines(buf, row, row, true, { title })
    vim.bo[buf].modifiable = false
    vim.api.nvim_buf_set_extmark(buf, ns, row, 0, { end_row = row, end_col = #title, hl_group = "AgentRewound" })
    vim.api.nvim_buf_set_extmark(buf, ns, row + 1, 0, { end_row = row + cut_lines, hl_group = "AgentRewound" })
    -- Kept with the tool rows, so a new chat window folds it again (render.refold).
    local id = ("rewound-%d"):format(row)
    local mark = vim.api.nvim_buf_set_extmark(buf, vim.api.nvim_create_namespace("agent.chat.rows"), row, 0, {})
    render.tools[id] = { name = "rewound", mark = mark, lines = cut_lines, folded = true }
    local last = vim.api.nvim_buf_line_count(buf)
    for _, win in ipairs(window.chat_windows()) do
      pcall(vim.api.nvim_win_call, win, function()
        vim.cmd(("%d,%dfold"):format(row + 1, row + 1 + cut_lines))
        vim.cmd(("silent! %dfoldclose"):format(row + 1))
        -- The window's top line was far down what is now one closed fold: it would show the
        -- empty lines past the end. The end of the chat instead, with the cut row above it.
        vim.api.nvim_win_set_cursor(win, { last, 0 })
        vim.cmd("normal! zb")
      end)
    end
  end
  local input = window.input_buf
  if e.prompt and input and vim.api.nvim_buf_is_valid(input) then
    vim.api.nvim_buf_set_lines(input, 0, -1, false, vim.split(tostring(e.prompt), "\n", { plain = true }))
    vim.api.nvim_buf_clear_namespace(input, vim.api.nvim_create_namespace("agent.input.hint"), 0, -1)
  end
  if e.message then
    vim.notify(tostring(e.message), vim.log.levels.INFO)
  end
end

function handlers.turn_started()
  status.current.prompted = true
  H.last_error = nil
  H.done = nil
  status.current.turn = true
  status.current.input, status.current.output, status.current.cached = 0, 0, 0
  status.current.cost = nil
  render.blank_line()
  render.put("## Agent", "AgentAgentHeader")
  render.put("\n\n")
  status.set("thinking")
end

function handlers.text(e)
  local state = status.current.state
  if status.current.turn and (state == "retrying" or state == "thinking") then
    status.set("writing") -- the answer streams: the model is no longer only thinking
  end
  render.put(e.text or "")
end

-- The agent's next message begins (ACP messageId): a paragraph of its own.
function handlers.message(_)
  render.blank_line()
end

function handlers.tool_started(e)
  local name = tostring(e.name)
  local tool = { name = name }
  render.tools[e.id] = tool
  H.running_tool = e.id
  render.newline()
  render.put(H.running_row(tool), "AgentToolRunning", e.id)
  render.put("\n")
  local args = type(e.args) == "table" and e.args or {}
  if (name == "read_file" or name == "edit_file") and type(args.path) == "string" then
    tool.path = args.path -- for follow mode, once it has finished
  end
  status.current.tool = name
  status.current.command = name == "run_bash" and type(args.command) == "string" and args.command or nil
  status.current.last_line = nil
  status.current.since = vim.uv.now()
  status.set("running")
  if name == "run_bash" then
    H.start_clock(tool)
  end
end

-- An external agent's thinking (ACP): dimmed, folded under a `thinking` row.
function handlers.thought(e)
  local block = render.block("thought", "… thinking", "AgentThought")
  block.text = block.text .. tostring(e.text or "")
  local lines = render.indented(block.text)
  local row = render.row_of(block)
  if row then
    local title = ("… thought (%d line%s)"):format(#lines, #lines == 1 and "" or "s")
    render.write_row(block, row, title, "AgentThought", lines, { output_hl = "AgentThought" })
  end
end

H.plan_marks = { completed = "[x]", in_progress = "[~]", pending = "[ ]" }

-- An external agent's plan (ACP), as a checklist; a new plan replaces the shown one.
function handlers.plan(e)
  local block = render.block("plan", "Plan", "AgentHeader")
  local lines = {}
  for _, entry in ipairs(type(e.entries) == "table" and e.entries or {}) do
    local mark = H.plan_marks[entry.status] or "[ ]"
    lines[#lines + 1] = ("- %s %s"):format(mark, tostring(entry.content or ""))
  end
  local row = render.row_of(block)
  if row then
    render.write_row(block, row, "Plan", "AgentHeader", lines, { fold = false, output_hl = "Normal" })
  end
end

-- One of an external agent's several plans (ACP plan_update): a `Plan` row of its own, written
-- the first time and rewritten in place on each update, so plans stay apart and live.
function handlers.plan_updated(e)
  local id = "plan:" .. tostring(e.id)
  local block = render.tools[id]
  if not block then
    render.newline()
    block = { name = "plan", kind = "plan", id = id, text = "", hl = "AgentHeader" }
    render.tools[id] = block
    render.put("Plan", "AgentHeader", id)
    render.put("\n")
    render.flush()
  end
  local lines = {}
  for _, entry in ipairs(type(e.entries) == "table" and e.entries or {}) do
    local mark = H.plan_marks[entry.status] or "[ ]"
    lines[#lines + 1] = ("- %s %s"):format(mark, tostring(entry.content or ""))
  end
  if type(e.text) == "string" then
    for line in (e.text .. "\n"):gmatch("(.-)\n") do
      lines[#lines + 1] = line
    end
  end
  local row = render.row_of(block)
  if row then
    render.write_row(block, row, "Plan", "AgentHeader", lines, { fold = false, output_hl = "Normal" })
  end
end

-- One of them is gone (ACP plan_removed): its row says so, its steps dropped.
function handlers.plan_removed(e)
  local block = render.tools["plan:" .. tostring(e.id)]
  local row = block and render.row_of(block)
  if row then
    render.write_row(block, row, "Plan (removed)", "AgentNotice", {}, { fold = false })
  end
end

-- An external agent's tool call changed (ACP tool_call_update): its row is rewritten in place.
function handlers.tool_updated(e)
  local tool = render.tools[e.id]
  local row = tool and render.row_of(tool)
  if not row then
    return
  end
  local title = tostring(e.title or e.name or tool.name or "")
  if title ~= "" then
    tool.name = title
  end
  local state = e.status and tostring(e.status) or nil
  local row_text = "… " .. tool.name .. ((state and state ~= "in_progress") and (" (" .. state .. ")") or "")
  local output = render.indented(e.output)
  render.flush()
  if e.running then
    -- A terminal it embeds still runs: its newest lines, open under the row, until it ends.
    render.write_row(tool, row, row_text, "AgentToolRunning", H.last_lines(output, H.live_lines()), { fold = false })
  else
    render.write_row(tool, row, row_text, "AgentToolRunning", output)
  end
end

-- How many of a running command's (or terminal's) newest lines its row shows: `live_lines`.
function H.live_lines()
  return require("agent.config").options.live_lines or 5
end

-- A running command's newest output (run_bash as it prints, at most once a frame): its last
-- lines, open under its row, until tool_finished puts the whole of it there, folded. The status
-- quotes the last of them.
function handlers.tool_progress(e)
  local tool = render.tools[e.id]
  if not tool or tool.ok ~= nil then
    return
  end
  local lines = render.indented(e.output)
  tool.live = H.fit(H.last_lines(lines, H.live_lines()))
  if H.running_tool == e.id then
    local last = H.last_lines(lines, 1)[1]
    status.current.last_line = last and vim.trim(last) or nil
    status.render()
  end
  H.rewrite_running(tool)
end

-- Live lines cut to the chat window's width: a long one would wrap and push the running row,
-- and its clock, out of sight (the whole of each comes with the finished row).
function H.fit(lines)
  local win = window.chat_windows()[1]
  if not win then
    return lines
  end
  local width = vim.api.nvim_win_get_width(win) - 1
  for i, line in ipairs(lines) do
    if vim.fn.strdisplaywidth(line) > width then
      lines[i] = require("agent.text").cut(vim.fn.strcharpart(line, 0, width + 1), width, true)
    end
  end
  return lines
end

-- The last `n` of `lines` (a trailing empty line, the end of the last output line, not counted).
function H.last_lines(lines, n)
  local last = #lines
  if last > 0 and vim.trim(lines[last]) == "" then
    last = last - 1
  end
  local out = {}
  for i = math.max(1, last - n + 1), last do
    out[#out + 1] = lines[i]
  end
  return out
end

function handlers.approval()
  require("agent.notice").approval()
  local tool = H.running_tool and render.tools[H.running_tool]
  if tool and tool.since then
    tool.since = nil -- nothing runs while the question is open
    H.rewrite_running(tool)
  end
  status.set("approval")
end

function handlers.decided(e)
  local tool = H.running_tool and render.tools[H.running_tool]
  if tool then
    -- What the row records, worded by the backend (`allowed once`, `refused: {reason}`).
    tool.note = tostring(e.note or e.decision)
    if tool.clock then
      tool.since = vim.uv.now() -- a command's seconds count from when it may run
    end
    H.rewrite_running(tool)
  end
  if status.current.state == "approval" then
    status.current.since = vim.uv.now() -- a command's seconds count from when it may run
    status.set("running")
  end
end

function handlers.tool_finished(e)
  -- A resumed row whose start came with it is a row of its own, as tool_started would have made
  -- it, whatever row had the same id before (ids repeat across turns).
  local tool = not e.started and render.tools[e.id] or nil
  local summary = (e.ok and "▸ " or "✗ ") .. tostring(e.summary or e.name or "")
  render.flush()
  local row = tool and render.row_of(tool)
  if not row then
    -- No tool_started for it: give it a row now.
    tool = { name = e.name }
    render.tools[e.id] = tool
    render.newline()
    render.put(summary, nil, e.id)
    render.put("\n")
    render.flush()
    row = render.row_of(tool)
  end
  tool.ok = e.ok
  tool.name = tool.name or e.name
  H.keep_diff(tool, e)
  tool.since, tool.clock, tool.live = nil, nil, nil
  if e.note then
    tool.note = tostring(e.note) -- a resumed row: its decision comes with it
  end
  H.keep_output(tool, e)
  local output, line_hls = H.output(e)
  render.write_row(tool, row, summary, H.finished_hl(e), output, { line_hls = line_hls })
  if e.later then
    H.later[e.later] = tool -- a resumed row: its output comes once every row is shown
  end
  if H.running_tool == e.id then
    H.running_tool = nil
    H.stop_clock()
  end
  if e.ok and tool.path and status.current.turn then
    H.follow_finished(tool, e)
  end
  status.current.tool, status.current.command, status.current.last_line = nil, nil, nil
  if status.current.turn then
    status.set("thinking")
  end
end

-- The output of a resumed row, sent once every row is shown: put under the row, folded with it.
function handlers.tool_output(e)
  local tool = H.later[e.later]
  H.later[e.later] = nil
  if tool then
    H.keep_output(tool, e)
    H.keep_diff(tool, e)
    render.put_output(tool, H.output(e))
  end
end

-- An edit's diff as its row shows it, and whether that is the diff as it was written (nothing in
-- it made visible): `keymaps.chat.undo` takes the edit back from it.
function H.keep_diff(tool, e)
  if e.diff and e.diff ~= "" then
    tool.diff = tostring(e.diff)
    tool.diff_exact = e.diff_exact == true
    tool.workspace = status.current.workspace -- the paths in it are relative to this root
  end
end

-- Follow mode: the file a read opens at its top, the file an edit changed at its first change.
function H.follow_finished(tool, e)
  local follow = require("agent.follow")
  if tool.name == "read_file" then
    follow.show(status.current.workspace, tool.path, 1)
  elseif tool.name == "edit_file" and e.diff then
    local line, count = follow.first_change(e.diff)
    follow.show(status.current.workspace, tool.path, line or 1, line and count or nil)
  end
end

-- An external agent's tool call names the files it works on (ACP locations): follow mode shows
-- the first, at its line (an edit's line highlighted for a moment).
function handlers.locations(e)
  local first = type(e.locations) == "table" and e.locations[1]
  if first and type(first.path) == "string" then
    local line = tonumber(first.line)
    require("agent.follow").show(status.current.workspace, first.path, line, (e.kind == "edit" and line) and 1 or nil)
  end
end

-- Keeps a finished row's whole output, as the model read it, for keymaps.chat.output.
function H.keep_output(tool, e)
  if e.output and e.output ~= "" then
    tool.output = tostring(e.output)
  end
end

-- The older part of the conversation was compacted: a folded row holding the summary.
function handlers.compacted(e)
  local prompts = tonumber(e.prompts) or 0
  local title = ("compacted %d prompt%s (%s → %s tokens)"):format(
    prompts,
    prompts == 1 and "" or "s",
    status.count(tonumber(e.before) or 0),
    status.count(tonumber(e.after) or 0)
  )
  local block = render.block("compacted", title, "AgentNotice")
  local row = render.row_of(block)
  if row then
    render.write_row(block, row, title, "AgentNotice", render.indented(tostring(e.summary or "")), {
      output_hl = "AgentThought",
    })
  end
  render.end_block("")
  local cost = tonumber(e.cost)
  if cost then
    local s = status.current
    s.spent, s.costed = (s.spent or 0) + cost, true
  end
  status.render()
end

-- An external agent compacted its context (ACP compaction_update): a row like the built-in
-- agent's `compacted` one, the summary it kept folded under it, rewritten in place as the
-- compaction goes on.
function handlers.compaction(e)
  local id = "compaction:" .. tostring(e.id)
  local titles = {
    in_progress = "compacting the conversation…",
    completed = "compacted the conversation",
    cancelled = "compacting the conversation was cancelled",
  }
  local failed = e.status == "failed"
  local title = failed
      and ("compacting the conversation failed: %s"):format(type(e.error) == "string" and e.error or "no reason given")
    or titles[e.status]
    or ("compaction: %s"):format(tostring(e.status))
  local hl = failed and "AgentError" or "AgentNotice"
  local block = render.tools[id]
  if not block then
    render.newline()
    block = { name = "compaction", kind = "compaction", id = id, text = "", hl = hl }
    render.tools[id] = block
    render.put(title, hl, id)
    render.put("\n")
    render.flush()
  end
  local row = render.row_of(block)
  if row then
    render.write_row(block, row, title, hl, render.indented(tostring(e.summary or "")), {
      output_hl = "AgentThought",
    })
  end
end

-- The backend takes the next prompt now (after `turn_done`, once the turn is saved).
function handlers.idle()
  -- After :Agent compact (which may have retried): no turn_done ends it. (A prompt just sent
  -- is "thinking" before its turn starts: left alone.)
  local state = status.current.state
  if status.current.resuming then
    -- The resume is over (shown, or failed part way): whatever its replay left, idle now.
    status.current.resuming = nil
    status.current.turn = false
    status.set("idle")
  elseif not status.current.turn and (state == "compacting" or state == "retrying") then
    status.set("idle")
  end
  if M.on_idle then
    vim.schedule(M.on_idle)
  end
end

-- A line to know about (`instructions: AGENTS.md`), dimmed.
function handlers.notice(e)
  render.newline()
  render.put(tostring(e.text or ""), "AgentNotice")
  render.put("\n")
  render.blank_line()
end

-- An external agent's notice (ACP `notice`): a row in the chat, and a notification at its
-- severity (scheduled: never in the middle of a batch of rows).
function handlers.agent_notice(e)
  local levels = { info = vim.log.levels.INFO, warning = vim.log.levels.WARN, error = vim.log.levels.ERROR }
  local level = levels[e.severity] or vim.log.levels.INFO
  local title = tostring(e.title or "")
  local description = type(e.description) == "string" and e.description or nil
  render.newline()
  render.put(
    ("%s: %s"):format(e.severity or "info", title),
    level == vim.log.levels.ERROR and "AgentError" or "AgentNotice"
  )
  render.put("\n")
  if description then
    render.put(description, "AgentNotice")
    render.put("\n")
  end
  render.blank_line()
  local said = ("agent: %s"):format(title) .. (description and (": " .. description) or "")
  vim.schedule(function()
    vim.notify(said, level)
  end)
end

function handlers.retrying(e)
  render.newline()
  render.put(
    ("retrying in %.1fs (attempt %d): %s"):format((e.delay_ms or 0) / 1000, e.attempt or 0, tostring(e.reason or "")),
    "AgentNotice"
  )
  render.put("\n")
  status.current.attempt = e.attempt
  status.set("retrying")
end

function handlers.usage(e)
  local s = status.current
  s.input, s.output, s.cached = e.input or s.input, e.output or s.output, e.cached or s.cached
  s.cost = tonumber(e.cost)
  status.render()
end

function handlers.turn_done(e)
  local s = status.current
  s.input, s.output = e.input or s.input, e.output or s.output
  local cost = tonumber(e.cost)
  if cost then
    s.spent, s.costed = (s.spent or 0) + cost, true
  elseif (s.input or 0) > 0 then
    s.priced = false -- a turn of unknown price: the conversation's cost is unknown from now on
  end
  s.cost = nil
  s.turn = false
  s.tool, s.command = nil, nil
  H.running_tool = nil
  H.stop_clock()
  local message = e.message
  -- A failed turn ends with the error it already reported: shown once.
  if e.outcome == "failed" and message == H.last_error then
    message = nil
  end
  if message and message ~= "" then
    render.blank_line()
    local calm = e.outcome == "done" or e.outcome == "cancelled"
    -- A row of its own, which `reviewable` may give a key.
    H.done_count = H.done_count + 1
    local id = ("done-%d"):format(H.done_count)
    H.done = { name = "done" }
    render.tools[id] = H.done
    render.put(message, calm and "AgentNotice" or "AgentError", id)
    render.put("\n")
  end
  if not H.redrawing and H.branch_typed then
    -- A new branch that could not start (nothing was drawn): its text goes back too.
    H.typed = H.typed or H.branch_typed
    H.branch_typed = nil
  end
  if e.outcome == "failed" and H.typed then
    -- Nothing typed is lost to a failure: the prompt waits in the input to be sent again.
    require("agent.chat.queue").back_to_input({ H.typed }, "agent: the failed prompt is back in the input")
    render.put("your prompt is back in the input: <C-s> sends it again", "AgentNotice")
    render.put("\n")
  end
  H.typed = nil
  status.set("idle")
  require("agent.notice").turn_done(tostring(e.outcome))
end

-- The turn that just ended changed files: its done row offers their diff (`d`).
function handlers.reviewable(e)
  local done = H.done
  if e.prompt and e.of then
    -- A resumed chat's older row: the done row after that prompt.
    done = H.done_after_prompt(tonumber(e.prompt), tonumber(e.of))
  end
  if not done then
    return
  end
  render.commit() -- the hint is an extmark on the row, in the buffer
  local row = render.row_of(done)
  if row then
    done.checkpoint = tostring(e.checkpoint)
    local files = tonumber(e.files) or 0
    render.hint(row, ("d: diff (%d file%s changed)"):format(files, files == 1 and "" or "s"))
  end
end

-- An external agent asks the person something (ACP elicitation): a row saying what, while its
-- float (lua/agent/elicit.lua) takes the answer.
function handlers.elicitation(e)
  local message = tostring(e.message or ""):match("^[^\n]*")
  local what = e.mode == "url" and ("to open a page on %s"):format(tostring(e.host))
    or ("a form of %d field%s"):format(#(e.fields or {}), #(e.fields or {}) == 1 and "" or "s")
  render.newline()
  render.put(("%s asks: %s (%s)"):format(tostring(e.agent), message, what), "AgentNotice")
  render.put("\n")
end

-- The question's float closes (lua/agent/rpc/init.lua); nothing to show in the chat.
function handlers.elicitation_closed(_) end

-- Files an external agent changed by itself, outside agent.nvim's checks: a row naming them,
-- whose `d` lists their diff and `u` puts them back as the turn's checkpoint had them.
function handlers.outside_changes(e)
  local files = type(e.files) == "table" and e.files or {}
  if #files == 0 then
    return
  end
  H.outside_count = (H.outside_count or 0) + 1
  local id = ("outside-%d"):format(H.outside_count)
  local names, paths = {}, {}
  for i, file in ipairs(files) do
    paths[i] = tostring(file.path)
    if i <= 5 then
      names[#names + 1] = tostring(file.shown)
    end
  end
  if #files > #names then
    names[#names + 1] = ("and %d more"):format(#files - #names)
  end
  local agent = tostring(e.agent)
  local undo_key = require("agent.config").options.keymaps.chat.undo
  local row = ("%d file%s changed by %s without asking agent.nvim: %s · d: diff"):format(
    #files,
    #files == 1 and "" or "s",
    agent,
    table.concat(names, ", ")
  ) .. (undo_key and (" · %s: undo"):format(undo_key) or "")
  render.newline()
  render.tools[id] = { name = "outside", checkpoint = tostring(e.checkpoint), outside = paths, agent = agent }
  render.put(row, "AgentOutside", id)
  render.put("\n")
  if not e.sandboxed then
    render.put(
      ("only the sandbox stops an agent writing by itself, outside the workspace too: acp.agents.%s.sandbox = true"):format(
        agent
      ),
      "AgentNotice"
    )
    render.put("\n")
  end
  render.blank_line()
end

function handlers.error(e)
  M.error(e.message or "agent: unknown error")
end

--- How many prompts the chat shows of the current history (its `## You` headers not cut).
---@return integer
function M.prompt_count()
  render.commit()
  return #H.prompt_marks()
end

--- The number of the prompt whose turn holds row `row` (0-based): the last `## You` at or
--- above it; nil above the first.
---@param row integer
---@return integer?
function M.turn_at(row)
  render.commit()
  local found
  for i, mark in ipairs(H.prompt_marks()) do
    if mark[2] <= row then
      found = i
    end
  end
  return found
end

--- A prompt is about to go as a new branch: the backend draws the chat again, this prompt
--- last; until then the chat counts as busy (a second key press sends nothing). `typed`, the
--- prompt as typed, goes back in the input if its turn fails.
---@param typed? string
function M.branching(typed)
  H.branch_typed = typed
  status.set("thinking")
end

-- Helpers ------------------------------------------------------------------------------------

-- The extmarks of the chat's `## You` headers, in order: one a prompt, the cut ones too.
--- The number of the prompt (from 1) whose `## You` block holds row `row` (0-based), or nil.
---@param row integer
---@return integer?
function M.prompt_at(row)
  render.commit()
  local prompts = H.prompt_marks()
  local buf = window.buf
  for i = #prompts, 1, -1 do
    local start = prompts[i][2]
    if row >= start then
      -- The block runs to the next `## ` header.
      for r = start + 1, row do
        local line = vim.api.nvim_buf_get_lines(buf, r, r + 1, false)[1] or ""
        if line:match("^## ") then
          return nil
        end
      end
      return i
    end
  end
  return nil
end

function H.prompt_marks()
  local buf = window.buf
  local ns = vim.api.nvim_create_namespace("agent.chat")
  local prompts = {}
  for _, mark in ipairs(vim.api.nvim_buf_get_extmarks(buf, ns, 0, -1, { details = true })) do
    local row, details = mark[2], mark[4]
    if details.hl_group == "AgentUserHeader" and vim.api.nvim_buf_get_lines(buf, row, row + 1, true)[1] == "## You" then
      prompts[#prompts + 1] = mark
    end
  end
  return prompts
end

-- The `done` row of prompt `n` of `of`: none unless the chat shows exactly `of` prompts (a
-- checkpoint missing would put the diff on the wrong row).
function H.done_after_prompt(n, of)
  render.commit()
  local prompts = H.prompt_marks()
  if not n or #prompts ~= of or not prompts[n] then
    return nil
  end
  local from = prompts[n][2]
  local to = prompts[n + 1] and prompts[n + 1][2] or math.huge
  local found, found_row
  for _, tool in pairs(render.tools) do
    if tool.name == "done" then
      local row = render.row_of(tool)
      if row and row > from and row < to and (not found_row or row > found_row) then
        found, found_row = tool, row
      end
    end
  end
  return found
end

-- Rewrites the row of a tool still running, with the newest lines it printed open under it.
function H.rewrite_running(tool)
  render.flush()
  local row = render.row_of(tool)
  if row then
    render.write_row(tool, row, H.running_row(tool), "AgentToolRunning", tool.live or {}, { fold = false })
  end
end

-- A running tool's row; a command that has run for a second or more says for how long.
function H.running_row(tool)
  local row = "… running " .. tool.name
  local secs = tool.since and math.floor((vim.uv.now() - tool.since) / 1000)
  if secs and secs >= 1 then
    row = ("%s (%ds)"):format(row, secs)
  end
  return row
end

-- A finished row's highlight: a failed result, a command that exited non-zero (run_bash's
-- summary ends with `-> exit N`, SPEC section 1, in a live and in a resumed chat alike), or a
-- plain row.
function H.finished_hl(e)
  if not e.ok then
    return "AgentToolFailed"
  end
  -- (` · allowed by …` may follow it: why it ran unasked.)
  local exit = e.name == "run_bash" and tostring(e.summary or ""):match("%-> exit (%d+)$")
    or e.name == "run_bash" and tostring(e.summary or ""):match("%-> exit (%d+) · ")
  if exit and exit ~= "0" then
    return "AgentToolExit"
  end
  return "AgentToolRow"
end

-- A finished row's lines under it: its output, then an edit's diff (each line highlighted as
-- a diff: the second value, by line).
function H.output(e)
  local lines = e.output and e.output ~= "" and render.indented(e.output) or {}
  if not e.diff or e.diff == "" then
    return lines, nil
  end
  local line_hls = {}
  for _, line in ipairs(render.indented(e.diff)) do
    lines[#lines + 1] = line
    local mark = line:sub(3, 3)
    local head = line:sub(3, 5)
    if head == "+++" or head == "---" or line:sub(3, 4) == "@@" then
      line_hls[#lines] = "AgentDiffHeader"
    elseif mark == "+" then
      line_hls[#lines] = "AgentDiffAdd"
    elseif mark == "-" then
      line_hls[#lines] = "AgentDiffDelete"
    end
  end
  return lines, line_hls
end

H.clock = nil ---@type uv.uv_timer_t? ticks once a second while a command runs

--- Stops the running command's clock for good (the conversation was closed).
function M.stop()
  H.stop_clock()
end

-- Counts a running command's seconds on its row: once a second only that row is rewritten,
-- until it finishes, the turn ends or the chat is cleared.
function H.start_clock(tool)
  H.stop_clock()
  tool.since, tool.clock = vim.uv.now(), true
  local timer = assert(vim.uv.new_timer())
  H.clock = timer
  timer:start(1000, 1000, function()
    vim.schedule(function()
      if H.clock == timer and render.tools[H.running_tool or ""] == tool and tool.since then
        H.rewrite_running(tool)
      end
    end)
  end)
end

function H.stop_clock()
  local timer = H.clock
  H.clock = nil
  if timer then
    timer:stop()
    timer:close()
  end
end

return M
