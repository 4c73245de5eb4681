--- The chat's state machine and its winbar: off → idle → thinking → running / approval /
--- retrying → idle (and idle → compacting → idle; `resuming` holds busy over a resume's replay), with the token counts, the model, and how long a command has run. What
--- require("agent").status() returns (see :help agent-statusline).

-- One copy per conversation (lua/agent/conversations.lua loads it, with the conversation's
-- number); required by name elsewhere, a stand-in for the copy of the conversation acted for.
if type(({ ... })[2]) ~= "number" then
  return require("agent.conversations").stand_in(...)
end

local text = require("agent.text")
local window = require("agent.chat.window")

local M = {}
local H = {}

--- Characters of a running command the status quotes.
H.COMMAND_CHARS = 40
--- Characters of a running command's last output line the status quotes.
H.LAST_LINE_CHARS = 40

--- The state: `state`, the token counts of the turn, whether a turn is running (`turn`), and
--- what the winbar names (provider, model, tool, command and since when, retry attempt).
M.current = { state = "off", input = 0, output = 0, cached = 0, turn = false, spent = 0, priced = true }
H.timer = nil
H.held = false -- a batch of events is being handled: the winbar is drawn once, at its end
H.stale = false -- something changed while held

--- Moves to `state` and redraws; a running command's seconds tick while it runs.
---@param state string
function M.set(state)
  M.current.state = state
  local counting = state == "running" and M.current.command ~= nil
  if counting and not H.timer then
    H.timer = vim.uv.new_timer()
    H.timer:start(1000, 1000, vim.schedule_wrap(M.render))
  elseif not counting and H.timer then
    H.timer:stop()
    H.timer:close()
    H.timer = nil
  end
  M.render()
end

--- Stops the seconds' ticking for good (the conversation was closed).
function M.stop()
  if H.timer then
    H.timer:stop()
    H.timer:close()
    H.timer = nil
  end
end

--- True while a prompt is being worked on (from sending it to `turn_done`).
---@return boolean
function M.busy()
  local state = M.current.state
  -- While a resume replays, its own prompts and turn ends move the state: the flag holds.
  if M.current.resuming then
    return true
  end
  return state == "thinking"
    or state == "writing"
    or state == "running"
    or state == "approval"
    or state == "retrying"
    or state == "compacting"
end

--- What the winbar's left side says: "idle", "running `cargo test` 12s", ...
---@param command_chars? integer how much of a running command to quote (default 40)
---@return string
function M.text(command_chars)
  local s = M.current
  if s.resuming then
    return "resuming the conversation"
  end
  if s.state == "running" then
    if s.command then
      local command = text.cut(tostring(s.command), command_chars or H.COMMAND_CHARS)
      local secs = math.floor((vim.uv.now() - (s.since or vim.uv.now())) / 1000)
      return ("running `%s` %ds%s"):format(command, secs, H.last_line(s))
    end
    return "running " .. (s.tool or "a tool")
  elseif s.state == "approval" then
    return "waiting for approval" .. H.unseen_hint()
  elseif s.state == "compacting" then
    return "compacting the conversation"
  elseif s.state == "retrying" then
    return ("retrying (attempt %d)"):format(s.attempt or 0)
  end
  return s.state
end

--- The one-line status for a statusline (|agent-statusline|): `agent: running cargo test
--- 12s`, `agent: waiting for approval`, `agent: idle · $0.42`; empty before the first prompt.
--- Reads only what the chat already holds (no RPC); builds one string. Every `%` in it is
--- doubled: it is statusline format (lualine and `%{%...%}` evaluate it), and a command or the
--- line it printed (`%{system('…')}`) must show as text, never run.
---@return string
function M.line()
  local s = M.current
  if s.state == "off" or not s.prompted then
    return ""
  end
  if s.state == "running" and s.command then
    local secs = math.floor((vim.uv.now() - (s.since or vim.uv.now())) / 1000)
    local line = ("agent: running %s %ds%s"):format(
      text.cut(tostring(s.command), H.COMMAND_CHARS),
      secs,
      H.last_line(s)
    )
    return (line:gsub("%%", "%%%%"))
  elseif s.state == "idle" then
    local cost = M.cost()
    return cost and ("agent: idle · " .. M.dollars(cost)) or "agent: idle"
  end
  return (("agent: " .. M.text()):gsub("%%", "%%%%"))
end

--- How to answer a question that waits unseen (hidden with <Esc>, or shown beside what was
--- being typed): ` · <M-a> or :Agent approve`; "" when the picker has it in hand.
function H.unseen_hint()
  -- Kept up to date by lua/agent/approval.lua.
  local waiting = M.current.question
  if not (waiting and waiting.unseen) then
    return ""
  end
  return waiting.key and (" · %s or :Agent approve"):format(waiting.key) or " · :Agent approve"
end

--- ` · ` and the last line a running command printed, cut; "" before it printed one.
function H.last_line(s)
  local last = s.last_line
  if not last or last == "" then
    return ""
  end
  return " · " .. text.cut(last, H.LAST_LINE_CHARS)
end

--- What the conversation has cost in dollars: the turns that ended and the one running; nil
--- until a turn with a known price ended or while any turn's price was unknown (never a wrong
--- figure).
---@return number?
function M.cost()
  local s = M.current
  local running = s.turn and s.cost or nil
  if not s.priced then
    return nil -- an earlier turn's price was unknown
  elseif s.turn and running == nil and (s.input or 0) > 0 then
    return nil -- this turn's is
  elseif not s.costed and running == nil then
    return nil -- nothing priced yet
  end
  return (s.spent or 0) + (running or 0)
end

--- A cost as the chat shows it: `$0.42`, `<$0.01` for less than a cent.
---@param cost number
---@return string
function M.dollars(cost)
  if cost > 0 and cost < 0.005 then
    return "<$0.01"
  end
  return ("$%.2f"):format(cost)
end

--- What an external agent says its session cost: dollars as `$0.42`, another unit after the
--- amount (`0.42 EUR`, `12 credits`).
---@param cost { amount: number, currency: string }
---@return string
function M.priced(cost)
  local amount = tonumber(cost.amount) or 0
  if cost.currency == "USD" then
    return M.dollars(amount)
  end
  return ("%s %s"):format(
    amount == math.floor(amount) and ("%d"):format(amount) or ("%.2f"):format(amount),
    tostring(cost.currency)
  )
end

--- Holds the winbar's redraws while a batch of events is handled (`true`), then draws it once if
--- anything changed (`false`).
---@param held boolean
function M.hold(held)
  H.held = held
  if not held and H.stale then
    M.render()
  end
end

--- The conversation's name (agent.conversations), shown first when several are live.
M.name = nil ---@type string?

--- Redraws the winbar of every chat window: the state always, then what fits of the tokens and
--- the model.
function M.render()
  if H.held then
    H.stale = true
    return
  end
  H.stale = false
  local function escape(s)
    return (s:gsub("%%", "%%%%"))
  end
  local s = M.current
  local left = M.text()
  -- With several conversations live, whose chat this is: `[fix tests] running ...`.
  local conversations = package.loaded["agent.conversations"]
  if M.name and conversations and #conversations.all() > 1 then
    left = ("[%s] %s"):format(M.name, left)
  end
  local count = M.count
  local cached = (s.cached or 0) > 0 and (" (%s cached)"):format(count(s.cached)) or ""
  local tokens = ("%s in%s / %s out"):format(count(s.input), cached, count(s.output))
  local bare = ("%s in / %s out"):format(count(s.input), count(s.output)) -- when narrow
  -- An external agent's context (usage_update): how full its window is.
  if s.context then
    tokens = ("%s · %s/%s ctx"):format(tokens, count(s.context.used), count(s.context.size))
  end
  -- The model, with an external agent's chosen model and mode (its config options).
  local model = s.model
  if model and s.agent_model then
    model = model .. " " .. s.agent_model
  end
  if s.mode then
    model = model and (s.mode .. " · " .. model) or s.mode
  end
  local full = model and (model .. " · " .. tokens) or tokens
  local cost = M.cost()
  local spent = cost and (" · " .. M.dollars(cost)) or ""
  if not cost and s.agent_cost then
    spent = " · " .. M.priced(s.agent_cost)
  end
  for _, win in ipairs(window.chat_windows()) do
    local width = vim.api.nvim_win_get_width(win)
    local here = left
    if s.last_line and s.state == "running" and vim.fn.strdisplaywidth(here) > width - 2 then
      -- A narrow chat: less of the command, so the line it printed last still shows.
      here = M.text(math.max(8, math.floor(width / 3)))
    end
    local room = width - vim.fn.strdisplaywidth(here) - 3
    local right = ""
    -- The widest that fits; an external agent's mode is kept longest (it changes what the agent
    -- does), then the cost.
    local moded = s.mode and s.mode .. " · " or ""
    local candidates = {
      full .. spent,
      moded .. tokens .. spent,
      moded .. bare .. spent,
      moded .. bare,
      bare .. spent,
      bare,
    }
    for _, candidate in ipairs(candidates) do
      if vim.fn.strdisplaywidth(candidate) <= room then
        right = candidate
        break
      end
    end
    -- The conversation's title (an external agent's session_info_update), in what is left.
    local shown = here
    local spare = room - vim.fn.strdisplaywidth(right) - 3
    if s.title and spare >= 8 then
      shown = here .. " · " .. text.cut(s.title, spare, true)
    end
    local bar = " " .. escape(shown) .. "%=" .. escape(right) .. " "
    vim.api.nvim_set_option_value("winbar", bar, { win = win, scope = "local" })
  end
end

--- A token count as the winbar shows it: `800`, `12.3k`, `1.2M`.
---@param n integer
---@return string
function M.count(n)
  if n < 1000 then
    return tostring(n)
  elseif n < 999950 then
    return ("%.1fk"):format(n / 1e3)
  end
  return ("%.1fM"):format(n / 1e6)
end

return M
