--- The conversation split: `agent://chat` (the conversation, markdown) above `agent://input`
--- (the prompt being written), and the state shown in the chat window's winbar.
---
--- Streaming must not slow Neovim down as the conversation grows (SPEC section 6), so:
--- - text only ever goes to the end of the buffer, one nvim_buf_set_text per batch of events;
--- - the buffer's markdown syntax and treesitter highlighting are off; the few highlights
---   (headers, tool rows) are extmarks placed on the lines as they are written;
--- - tool output is inserted below its row once, when the tool finishes, and folded.
--- Windows are never entered: the user's cursor and focus stay where they are, except that a
--- chat window whose cursor is on the last line follows the text, like a log.

local M = {}
local H = {}

H.CHAT = "agent://chat"
H.INPUT = "agent://input"
H.INPUT_HEIGHT = 5
H.ns = vim.api.nvim_create_namespace("agent.chat") -- highlights
H.ns_rows = vim.api.nvim_create_namespace("agent.chat.rows") -- where each tool row is
H.ns_hint = vim.api.nvim_create_namespace("agent.input.hint")

H.buf = nil ---@type integer?
H.input_buf = nil ---@type integer?

-- Text written to the chat, as the renderer knows it.
H.pending = {} -- pieces not yet in the buffer: { text, hl = group?, tool = id? }
H.batching = false
H.tail = "" -- the last two bytes of the chat's text, pending pieces included ("" = empty)
H.end_row, H.end_col = 0, 0 -- where the buffer's text ends (pending pieces excluded)
H.tools = {} -- tool call id -> { name, mark (row extmark), lines (output lines), ok, note }
H.running_tool = nil ---@type string?
H.draining = false -- after `:Agent new` during a turn: skip that turn's last events

-- What the winbar and status() show.
H.state = { state = "off", input = 0, output = 0, turn = false }
H.timer = nil
H.last_error = nil ---@type string? the last error shown in this turn (a failed turn ends with it)

--- Opens the split (chat above, input below) in the current tab page if it is not there.
---@param opts? { focus?: boolean } focus: put the cursor in the input window
function M.open(opts)
  opts = opts or {}
  H.ensure_buffers()
  local config = require("agent.config").options
  local chat_win = H.window(H.buf)
  if not chat_win then
    chat_win = vim.api.nvim_open_win(H.buf, false, {
      split = config.window.side,
      win = -1,
      width = require("agent.config").window_width(),
    })
    H.setup_chat_window(chat_win)
  end
  local input_win = H.window(H.input_buf)
  if not input_win then
    input_win = vim.api.nvim_open_win(H.input_buf, false, {
      split = "below",
      win = chat_win,
      height = H.INPUT_HEIGHT,
    })
    H.setup_input_window(input_win)
  end
  H.render_status()
  if opts.focus then
    vim.api.nvim_set_current_win(input_win)
  end
end

--- True when the chat is shown in the current tab page.
---@return boolean
function M.visible()
  return H.buf ~= nil and H.window(H.buf) ~= nil
end

--- Moves the cursor out of the agent's windows (to the previous window, else a new one).
function M.leave()
  local function ours()
    local buf = vim.api.nvim_get_current_buf()
    return buf == H.buf or buf == H.input_buf
  end
  if not ours() then
    return
  end
  vim.cmd("wincmd p")
  if ours() then
    local side = require("agent.config").options.window.side
    vim.cmd((side == "right" and "topleft" or "botright") .. " vnew")
  end
end

--- True while a prompt is being worked on (from sending it to `turn_done`).
---@return boolean
function M.busy()
  local state = H.state.state
  return state == "thinking" or state == "running" or state == "approval" or state == "retrying"
end

--- The state for statuslines: see :help agent-statusline.
---@return agent.Status
function M.status()
  local s = H.state
  return {
    state = s.state,
    text = H.status_text(),
    input = s.input,
    output = s.output,
    provider = s.provider,
    model = s.model,
  }
end

--- Shows the user's prompt under `## You`; the state becomes `thinking`.
---@param text string
function M.user_prompt(text)
  H.ensure_buffers()
  H.blank_line()
  H.put("## You", "AgentHeader")
  H.put("\n\n")
  H.put(text)
  H.newline()
  H.write()
  H.state.input, H.state.output = 0, 0
  H.state.turn = false
  H.set_state("thinking")
end

--- Shows an error (highlighted) in the chat, and through vim.notify when the chat is not
--- visible.
---@param message string
function M.error(message)
  H.last_error = message
  H.ensure_buffers()
  H.newline()
  H.put(message, "AgentError")
  H.put("\n")
  H.write()
  if not H.state.turn and H.state.state == "thinking" then
    -- The prompt failed before a turn began: no turn_done will come.
    H.set_state("idle")
  end
  if not M.visible() then
    vim.notify(message, vim.log.levels.ERROR)
  end
end

--- Clears the conversation (`:Agent new`). What is left of a turn that was running (the
--- backend cancels it) is not shown in the fresh chat.
function M.clear()
  H.draining = H.state.turn
  H.pending = {}
  H.tools, H.running_tool = {}, nil
  H.tail, H.end_row, H.end_col = "", 0, 0
  if H.buf and vim.api.nvim_buf_is_valid(H.buf) then
    vim.api.nvim_buf_clear_namespace(H.buf, H.ns, 0, -1)
    vim.api.nvim_buf_clear_namespace(H.buf, H.ns_rows, 0, -1)
    H.modify(function()
      vim.api.nvim_buf_set_lines(H.buf, 0, -1, true, {})
    end)
  end
  H.state.input, H.state.output, H.state.turn = 0, 0, false
  H.set_state(require("agent.rpc").running() and "idle" or "off")
end

--- Holds buffer writes until end_batch(), so one batch of events is one buffer call.
function M.begin_batch()
  H.batching = true
end

--- Writes what the batch queued.
function M.end_batch()
  H.batching = false
  H.flush()
end

--- The backend was started: `idle` until a prompt is sent.
function M.backend_started()
  if H.state.state == "off" then
    H.set_state("idle")
  end
end

--- The backend was stopped on purpose.
function M.backend_stopped()
  H.state.turn = false
  H.set_state("off")
end

--- The backend exited by itself: say so in the chat; the next prompt starts a new one.
---@param message string
function M.backend_exited(message)
  H.state.turn = false
  H.set_state("off")
  M.error(message)
end

--- Shows one event from the backend (see src/nvim/protocol.rs, UiEvent).
---@param event table
function M.handle(event)
  H.ensure_buffers()
  if H.draining then
    local kind = event.type
    if kind == "turn_done" or kind == "turn_started" then
      H.draining = false
    end
    if kind ~= "turn_started" and kind ~= "started" and kind ~= "error" then
      return
    end
  end
  local handler = H.handlers[event.type]
  if H.open_block and event.type ~= H.open_block.kind and event.type ~= "usage" then
    H.open_block = nil
  end
  if handler then
    handler(H.value(event))
  end
  H.write()
end

-- Event handlers -----------------------------------------------------------------------------

H.handlers = {}

-- An external agent (ACP) is connected: prompts go to it until :Agent new.
function H.handlers.acp_started(e)
  H.state.model = tostring(e.name)
  H.blank_line()
  H.put(("connected to %s (ACP); prompts go to it until :Agent new"):format(tostring(e.name)), "AgentNotice")
  H.put("\n")
  H.render_status()
end

function H.handlers.started(e)
  H.state.provider = e.provider ~= "" and e.provider or nil
  H.state.model = e.model ~= "" and e.model or nil
  if H.state.state == "off" then
    H.state.state = "idle"
  end
  H.render_status()
end

function H.handlers.turn_started()
  H.last_error = nil
  H.state.turn = true
  H.state.input, H.state.output = 0, 0
  H.blank_line()
  H.put("## Agent", "AgentHeader")
  H.put("\n\n")
  H.set_state("thinking")
end

function H.handlers.text(e)
  if H.state.state == "retrying" then
    H.set_state("thinking")
  end
  H.put(e.text or "")
end

function H.handlers.tool_started(e)
  e.name = tostring(e.name)
  H.tools[e.id] = { name = e.name }
  H.running_tool = e.id
  H.newline()
  H.put("… running " .. e.name, "AgentToolRunning", e.id)
  H.put("\n")
  local args = type(e.args) == "table" and e.args or {}
  H.state.tool = e.name
  H.state.command = e.name == "run_bash" and type(args.command) == "string" and args.command or nil
  H.state.since = vim.uv.now()
  H.set_state("running")
end

-- A block (thought, plan) is a row with lines under it, rewritten in place as it grows. It
-- starts at the end of the chat; anything else that is written ends it.
function H.block(kind, title, hl)
  local block = H.open_block
  if block and block.kind == kind then
    return block
  end
  H.block_count = (H.block_count or 0) + 1
  local id = ("%s-%d"):format(kind, H.block_count)
  block = { name = kind, kind = kind, id = id, text = "", hl = hl }
  H.tools[id] = block
  H.newline()
  H.put(title, hl, id)
  H.put("\n")
  H.flush()
  H.open_block = block
  return block
end

-- An external agent's thinking (ACP): dimmed, folded under a `thinking` row.
function H.handlers.thought(e)
  local block = H.block("thought", "… thinking", "AgentThought")
  block.text = block.text .. tostring(e.text or "")
  local lines = {}
  for line in H.output_lines(block.text) do
    lines[#lines + 1] = line == "" and "" or ("  " .. line)
  end
  local row = H.row_of(block)
  if row then
    local title = ("… thought (%d line%s)"):format(#lines, #lines == 1 and "" or "s")
    H.write_row(block, row, title, "AgentThought", lines, { output_hl = "AgentThought" })
  end
end

H.plan_marks = { completed = "[x]", in_progress = "[~]", pending = "[ ]" }

-- An external agent's plan (ACP), as a checklist; a new plan replaces the shown one.
function H.handlers.plan(e)
  local block = H.block("plan", "Plan", "AgentHeader")
  local lines = {}
  for _, entry in ipairs(type(e.entries) == "table" and e.entries or {}) do
    entry = H.value(entry)
    local mark = H.plan_marks[entry.status] or "[ ]"
    lines[#lines + 1] = ("- %s %s"):format(mark, H.one_line(entry.content or ""))
  end
  local row = H.row_of(block)
  if row then
    H.write_row(block, row, "Plan", "AgentHeader", lines, { fold = false, output_hl = "Normal" })
  end
end

-- An external agent's tool call changed (ACP tool_call_update): its row is rewritten in place.
function H.handlers.tool_updated(e)
  local tool = H.tools[e.id]
  local row = tool and H.row_of(tool)
  if not row then
    return
  end
  local title = H.one_line(e.title or e.name or tool.name or "")
  if title ~= "" then
    tool.name = title
  end
  local status = e.status and tostring(e.status) or nil
  local text = "… " .. tool.name .. ((status and status ~= "in_progress") and (" (" .. status .. ")") or "")
  local output = {}
  for line in H.output_lines(e.output) do
    output[#output + 1] = line == "" and "" or ("  " .. line)
  end
  H.flush()
  H.write_row(tool, row, text, "AgentToolRunning", output)
end

function H.handlers.approval()
  H.set_state("approval")
end

function H.handlers.decided(e)
  local decision = type(e.decision) == "table" and H.value(e.decision).decision or e.decision
  local notes = {
    allow_once = "allowed once",
    allow_session = "allowed for this session",
    allow_all = "allowed (everything this session)",
    refuse = "refused",
  }
  local reason = type(e.decision) == "table" and H.value(e.decision).reason
  local tool = H.running_tool and H.tools[H.running_tool]
  if tool then
    tool.note = notes[decision] or tostring(decision)
    if decision == "refuse" and type(reason) == "string" and reason ~= "" then
      tool.note = "refused: " .. H.one_line(reason)
    end
    H.flush()
    local row = H.row_of(tool)
    if row then
      H.write_row(tool, row, "… running " .. tool.name, "AgentToolRunning", {})
    end
  end
  if H.state.state == "approval" then
    H.state.since = vim.uv.now() -- a command's seconds count from when it may run
    H.set_state("running")
  end
end

function H.handlers.tool_finished(e)
  local tool = H.tools[e.id]
  local summary = (e.ok and "▸ " or "✗ ") .. H.one_line(e.summary or e.name or "")
  H.flush()
  local row = tool and H.row_of(tool)
  if not row then
    -- No tool_started for it: give it a row now.
    tool = { name = e.name }
    H.tools[e.id] = tool
    H.newline()
    H.put(summary, nil, e.id)
    H.put("\n")
    H.flush()
    row = H.row_of(tool)
  end
  local output = {}
  for line in H.output_lines(e.output) do
    output[#output + 1] = line == "" and "" or ("  " .. line)
  end
  tool.ok = e.ok
  H.write_row(tool, row, summary, e.ok and "AgentToolRow" or "AgentToolError", output)
  if H.running_tool == e.id then
    H.running_tool = nil
  end
  H.state.tool, H.state.command = nil, nil
  if H.state.turn then
    H.set_state("thinking")
  end
end

function H.handlers.retrying(e)
  H.newline()
  H.put(
    ("retrying in %.1fs (attempt %d): %s"):format((e.delay_ms or 0) / 1000, e.attempt or 0, H.one_line(e.reason or "")),
    "AgentNotice"
  )
  H.put("\n")
  H.state.attempt = e.attempt
  H.set_state("retrying")
end

function H.handlers.usage(e)
  H.state.input, H.state.output = e.input or H.state.input, e.output or H.state.output
  H.render_status()
end

function H.handlers.turn_done(e)
  H.state.input, H.state.output = e.input or H.state.input, e.output or H.state.output
  H.state.turn = false
  H.state.tool, H.state.command = nil, nil
  H.running_tool = nil
  local message = e.message
  -- A failed turn ends with the error it already reported: shown once.
  if e.outcome == "failed" and message == H.last_error then
    message = nil
  end
  if message and message ~= "" then
    H.blank_line()
    local calm = e.outcome == "done" or e.outcome == "cancelled"
    H.put(message, calm and "AgentNotice" or "AgentError")
    H.put("\n")
  end
  H.set_state("idle")
end

function H.handlers.error(e)
  M.error(e.message or "agent: unknown error")
end

-- Writing ------------------------------------------------------------------------------------

-- Queues `text` at the end of the chat (H.write() or the batch's end writes it). A piece with
-- `hl` (a highlight group) or `tool` (the id whose row it is) starts a line; the caller makes
-- sure of that with H.newline().
function H.put(text, hl, tool)
  if text == "" then
    return
  end
  H.pending[#H.pending + 1] = { text = text, hl = hl, tool = tool }
  H.tail = (H.tail .. text):sub(-2)
end

-- Writes the queued text now, unless a batch of events is being handled (it writes at its end).
function H.write()
  if not H.batching then
    H.flush()
  end
end

-- Ends the current line unless the text is at the start of one.
function H.newline()
  if H.tail ~= "" and H.tail:sub(-1) ~= "\n" then
    H.put("\n")
  end
end

-- Leaves one blank line before what comes next (nothing at the top of the chat).
function H.blank_line()
  if H.tail == "" or H.tail == "\n" or H.tail == "\n\n" then
    return
  end
  H.put(H.tail:sub(-1) == "\n" and "\n" or "\n\n")
end

-- Writes the pending pieces with one nvim_buf_set_text at the end, then places their
-- highlights and row marks.
function H.flush()
  if #H.pending == 0 then
    return
  end
  local pieces = H.pending
  H.pending = {}
  local buf = H.buf
  local texts = {}
  for i, piece in ipairs(pieces) do
    texts[i] = piece.text
  end
  local lines = vim.split(table.concat(texts), "\n", { plain = true })
  local followers = H.followers()
  H.check_end()
  H.modify(function()
    vim.api.nvim_buf_set_text(buf, H.end_row, H.end_col, H.end_row, H.end_col, lines)
  end)
  local row, col = H.end_row, H.end_col
  for _, piece in ipairs(pieces) do
    local start_row, start_col = row, col
    local newlines, last = 0, nil
    local from = 1
    while true do
      local at = piece.text:find("\n", from, true)
      if not at then
        break
      end
      newlines, last, from = newlines + 1, at, at + 1
    end
    if newlines == 0 then
      col = col + #piece.text
    else
      row, col = row + newlines, #piece.text - last
    end
    if piece.hl then
      vim.api.nvim_buf_set_extmark(buf, H.ns, start_row, start_col, {
        end_row = row,
        end_col = col,
        hl_group = piece.hl,
      })
    end
    local tool = piece.tool and H.tools[piece.tool]
    if tool then
      tool.mark = vim.api.nvim_buf_set_extmark(buf, H.ns_rows, start_row, 0, {})
    end
  end
  H.end_row, H.end_col = row, col
  H.follow(followers)
end

-- The end position is tracked rather than read (reading the last line would copy it, and the
-- model may write very long lines). Should the buffer have been changed behind our back, find
-- the end again.
function H.check_end()
  local count = vim.api.nvim_buf_line_count(H.buf)
  if count ~= H.end_row + 1 then
    local last = vim.api.nvim_buf_get_lines(H.buf, count - 1, count, true)[1]
    H.end_row, H.end_col = count - 1, #last
  end
end

function H.modify(fn)
  local buf = H.buf
  vim.bo[buf].modifiable = true
  local ok, err = pcall(fn)
  vim.bo[buf].modifiable = false
  if not ok then
    error(err, 0)
  end
end

-- Chat windows whose cursor is on the last line: they follow the text.
function H.followers()
  local last = vim.api.nvim_buf_line_count(H.buf)
  local windows = {}
  for _, win in ipairs(vim.fn.win_findbuf(H.buf)) do
    if vim.api.nvim_win_get_cursor(win)[1] == last then
      windows[#windows + 1] = win
    end
  end
  return windows
end

function H.follow(windows)
  local last = vim.api.nvim_buf_line_count(H.buf)
  for _, win in ipairs(windows) do
    pcall(vim.api.nvim_win_set_cursor, win, { last, 0 })
  end
end

function H.row_of(tool)
  if not tool.mark then
    return nil
  end
  local pos = vim.api.nvim_buf_get_extmark_by_id(H.buf, H.ns_rows, tool.mark, {})
  return pos[1]
end

-- Rewrites a tool's row (one line, at `row`) as `text`, followed by the approval decision if
-- there was one, and inserts `output` below it, folded with the row. One buffer call.
function H.write_row(tool, row, text, hl, output, opts)
  opts = opts or {}
  if tool.note then
    text = text .. " · " .. tool.note
  end
  local lines = { text }
  for _, line in ipairs(output) do
    lines[#lines + 1] = line
  end
  local followers = H.followers()
  -- The row and the output written under it before (an updated tool call, a growing thought).
  local old = tool.lines or 0
  for _, win in ipairs(old > 0 and vim.fn.win_findbuf(H.buf) or {}) do
    H.unfold(win, row)
  end
  vim.api.nvim_buf_clear_namespace(H.buf, H.ns, row, row + 1 + old)
  H.modify(function()
    vim.api.nvim_buf_set_lines(H.buf, row, row + 1 + old, true, lines)
  end)
  H.end_row = H.end_row + #output - old
  tool.lines = #output
  tool.mark = vim.api.nvim_buf_set_extmark(H.buf, H.ns_rows, row, 0, { id = tool.mark })
  vim.api.nvim_buf_set_extmark(H.buf, H.ns, row, 0, { end_row = row, end_col = #text, hl_group = hl })
  if #output > 0 then
    vim.api.nvim_buf_set_extmark(H.buf, H.ns, row + 1, 0, {
      end_row = row + #output,
      end_col = #output[#output],
      hl_group = opts.output_hl or "AgentToolOutput",
    })
    tool.folded = opts.fold ~= false
    if tool.folded then
      for _, win in ipairs(vim.fn.win_findbuf(H.buf)) do
        H.fold(win, row, #output)
      end
    end
  end
  H.follow(followers)
end

-- Deletes the fold on a row (before its output is rewritten).
function H.unfold(win, row)
  pcall(vim.api.nvim_win_call, win, function()
    local view = vim.fn.winsaveview()
    vim.api.nvim_win_set_cursor(0, { row + 1, 0 })
    vim.cmd("silent! normal! zD")
    vim.fn.winrestview(view)
  end)
end

-- Folds a tool's row with its output, closed: the closed fold shows the row ('foldtext' empty).
function H.fold(win, row, lines)
  pcall(vim.api.nvim_win_call, win, function()
    vim.cmd(("%d,%dfold"):format(row + 1, row + 1 + lines))
    vim.cmd(("silent! %dfoldclose"):format(row + 1))
  end)
end

-- Folds are per window: a new chat window gets every tool's fold again.
function H.refold(win)
  pcall(vim.api.nvim_win_call, win, function()
    vim.cmd("silent! normal! zE")
  end)
  for _, tool in pairs(H.tools) do
    local row = (tool.lines or 0) > 0 and tool.folded ~= false and H.row_of(tool)
    if row then
      H.fold(win, row, tool.lines)
    end
  end
end

function H.output_lines(output)
  if type(output) ~= "string" or output == "" then
    return function() end
  end
  local lines = vim.split(output:gsub("\r\n", "\n"), "\n", { plain = true })
  while #lines > 0 and lines[#lines] == "" do
    lines[#lines] = nil
  end
  local i = 0
  return function()
    i = i + 1
    return lines[i]
  end
end

function H.one_line(text)
  return (tostring(text):gsub("%s*\n%s*", " "))
end

-- Decoded msgpack nils arrive as vim.NIL: make them nil.
function H.value(tbl)
  local out = {}
  for k, v in pairs(tbl) do
    if v ~= vim.NIL then
      out[k] = v
    end
  end
  return out
end

-- State and winbar ---------------------------------------------------------------------------

function H.set_state(state)
  H.state.state = state
  local counting = state == "running" and H.state.command ~= nil
  if counting and not H.timer then
    H.timer = vim.uv.new_timer()
    H.timer:start(1000, 1000, vim.schedule_wrap(H.render_status))
  elseif not counting and H.timer then
    H.timer:stop()
    H.timer:close()
    H.timer = nil
  end
  H.render_status()
end

function H.status_text()
  local s = H.state
  if s.state == "running" then
    if s.command then
      local command = H.one_line(s.command)
      if vim.fn.strchars(command) > 40 then
        command = vim.fn.strcharpart(command, 0, 39) .. "…"
      end
      return ("running `%s` %ds"):format(command, math.floor((vim.uv.now() - (s.since or vim.uv.now())) / 1000))
    end
    return "running " .. (s.tool or "a tool")
  elseif s.state == "approval" then
    return "waiting for approval"
  elseif s.state == "retrying" then
    return ("retrying (attempt %d)"):format(s.attempt or 0)
  end
  return s.state
end

function H.render_status()
  if not (H.buf and vim.api.nvim_buf_is_valid(H.buf)) then
    return
  end
  local function escape(text)
    return (text:gsub("%%", "%%%%"))
  end
  local left = H.status_text()
  local tokens = ("%d in / %d out"):format(H.state.input, H.state.output)
  local full = H.state.model and (H.state.model .. " · " .. tokens) or tokens
  for _, win in ipairs(vim.fn.win_findbuf(H.buf)) do
    -- What fits: the state always, then the tokens, then the model.
    local room = vim.api.nvim_win_get_width(win) - vim.fn.strdisplaywidth(left) - 3
    local right = ""
    if vim.fn.strdisplaywidth(full) <= room then
      right = full
    elseif vim.fn.strdisplaywidth(tokens) <= room then
      right = tokens
    end
    local bar = " " .. escape(left) .. "%=" .. escape(right) .. " "
    vim.api.nvim_set_option_value("winbar", bar, { win = win, scope = "local" })
  end
end

-- Buffers and windows ------------------------------------------------------------------------

function H.window(buf)
  if not buf then
    return nil
  end
  for _, win in ipairs(vim.api.nvim_tabpage_list_wins(0)) do
    if vim.api.nvim_win_get_buf(win) == buf then
      return win
    end
  end
  return nil
end

function H.scratch(name)
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if vim.api.nvim_buf_get_name(buf) == name then
      vim.api.nvim_buf_delete(buf, { force = true })
    end
  end
  local buf = vim.api.nvim_create_buf(false, true)
  vim.api.nvim_buf_set_name(buf, name)
  vim.bo[buf].buftype = "nofile"
  vim.bo[buf].bufhidden = "hide"
  vim.bo[buf].swapfile = false
  vim.bo[buf].filetype = "markdown"
  return buf
end

function H.ensure_buffers()
  if not (H.buf and vim.api.nvim_buf_is_valid(H.buf)) then
    H.pending, H.tools, H.running_tool = {}, {}, nil
    H.tail, H.end_row, H.end_col = "", 0, 0
    local buf = H.scratch(H.CHAT)
    H.buf = buf
    vim.bo[buf].undolevels = -1 -- nothing to undo, and no memory spent on it
    vim.bo[buf].modifiable = false
    H.plain(buf)
    vim.schedule(function()
      H.plain(buf) -- FileType handlers that start treesitter later
    end)
    vim.api.nvim_create_autocmd("BufWinEnter", {
      buffer = buf,
      desc = "agent: keep the chat's highlighting cost flat",
      callback = function()
        H.plain(buf)
      end,
    })
    H.keymaps(buf, {
      { "n", "<CR>", H.toggle_fold, "agent: show or hide the tool output under the cursor" },
      { "n", "<C-c>", H.cancel, "agent: stop the running turn" },
    })
  end
  if not (H.input_buf and vim.api.nvim_buf_is_valid(H.input_buf)) then
    local buf = H.scratch(H.INPUT)
    H.input_buf = buf
    H.keymaps(buf, {
      { "n", "<CR>", H.submit, "agent: send the prompt" },
      { { "n", "i" }, "<C-s>", H.submit, "agent: send the prompt" },
      { "n", "<C-c>", H.cancel, "agent: stop the running turn" },
    })
    vim.api.nvim_create_autocmd({ "TextChanged", "TextChangedI", "BufWinEnter" }, {
      buffer = buf,
      desc = "agent: the input's hint when it is empty",
      callback = function()
        H.hint(buf)
      end,
    })
    H.hint(buf)
  end
end

-- Markdown's regex syntax and treesitter re-parse the buffer as it grows: off for the chat.
function H.plain(buf)
  if not vim.api.nvim_buf_is_valid(buf) then
    return
  end
  local highlighter = package.loaded["vim.treesitter.highlighter"]
  if highlighter and highlighter.active[buf] then
    pcall(vim.treesitter.stop, buf)
  end
  if vim.bo[buf].syntax ~= "OFF" then
    vim.bo[buf].syntax = "OFF"
  end
end

function H.keymaps(buf, maps)
  for _, map in ipairs(maps) do
    vim.keymap.set(map[1], map[2], map[3], { buffer = buf, desc = map[4], nowait = true, silent = true })
  end
end

function H.hint(buf)
  vim.api.nvim_buf_clear_namespace(buf, H.ns_hint, 0, -1)
  local lines = vim.api.nvim_buf_get_lines(buf, 0, 2, false)
  if #lines == 1 and lines[1] == "" then
    vim.api.nvim_buf_set_extmark(buf, H.ns_hint, 0, 0, {
      virt_text = { { "Ask the agent… <C-s> sends, <C-c> stops", "AgentInputHint" } },
      virt_text_pos = "overlay",
    })
  end
end

function H.window_options(win, options)
  for name, value in pairs(options) do
    vim.api.nvim_set_option_value(name, value, { win = win, scope = "local" })
  end
end

-- What the chat and the input windows share: no gutter, soft-wrapped text.
H.plain_window = {
  number = false,
  relativenumber = false,
  signcolumn = "no",
  foldcolumn = "0",
  statuscolumn = "",
  colorcolumn = "",
  wrap = true,
  linebreak = true,
  winfixwidth = true,
}

function H.setup_chat_window(win)
  H.window_options(win, H.plain_window)
  H.window_options(win, {
    spell = false,
    list = false,
    foldenable = true,
    foldmethod = "manual",
    foldlevel = 0,
    foldminlines = 0,
    foldtext = "",
    fillchars = "fold: ,eob: ",
  })
  H.refold(win)
  vim.api.nvim_win_set_cursor(win, { vim.api.nvim_buf_line_count(H.buf), 0 })
  local input_buf = H.input_buf
  vim.api.nvim_create_autocmd("WinClosed", {
    pattern = tostring(win),
    once = true,
    desc = "agent: close the input with its chat",
    callback = function()
      vim.schedule(function()
        local input_win = H.window(input_buf)
        if input_win and #vim.api.nvim_tabpage_list_wins(0) > 1 then
          pcall(vim.api.nvim_win_close, input_win, false)
        end
      end)
    end,
  })
end

function H.setup_input_window(win)
  H.window_options(win, H.plain_window)
  H.window_options(win, {
    winfixheight = true,
    fillchars = "eob: ",
  })
end

-- Keys ---------------------------------------------------------------------------------------

function H.toggle_fold()
  if vim.fn.foldlevel(".") > 0 then
    vim.cmd("normal! za")
  end
end

function H.cancel()
  require("agent").stop()
end

function H.submit()
  local buf = H.input_buf
  local text = vim.trim(table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n"))
  if text == "" then
    return
  end
  if require("agent").ask(text) then
    vim.api.nvim_buf_set_lines(buf, 0, -1, false, {})
    H.hint(buf)
  end
end

return M
