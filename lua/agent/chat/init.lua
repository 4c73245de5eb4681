--- The conversation split: `agent: chat` above `agent: input`, and the state shown in the chat
--- window's winbar. This module is the chat's API; the parts live beside it:
--- - window.lua: the buffers, windows, their options and keys;
--- - render.lua: writing to the chat buffer (batched appends, rows rewritten in place, folds);
--- - handlers.lua: what each backend event does;
--- - status.lua: the state machine and the winbar.
--- None of them requires require("agent") or require("agent.rpc"): what the keys do is handed in
--- (set_actions), and the backend tells the chat about itself.

-- One copy per conversation (lua/agent/conversations.lua loads it, with the conversation's
-- number); required by name elsewhere, a stand-in for the copy of the conversation acted for.
if type(({ ... })[2]) ~= "number" then
  return require("agent.conversations").stand_in(...)
end

local handlers = require("agent.chat.handlers")
local queue = require("agent.chat.queue")
local render = require("agent.chat.render")
local status = require("agent.chat.status")
local window = require("agent.chat.window")

local M = {}

window.on_chat_window = render.refold
window.checkpoint_at = handlers.checkpoint_at
window.output_at = handlers.output_at
window.prompt_at = handlers.prompt_at
window.branched_at = function(row)
  local turn = handlers.prompt_at(row)
  for _, mark in ipairs(turn and handlers.branch_marks or {}) do
    if mark.turn == turn then
      return true
    end
  end
  return false
end

--- What the chat's keys do: `submit(text)` sends a prompt (true when it was sent), `cancel()`
--- stops the turn, `approve()` goes to the waiting question, `review(checkpoint)` lists what a
--- prompt changed. require("agent") sets them. `idle()` is called when a prompt's work has
--- ended (the next queued prompt may go).
---@param actions { submit: fun(text: string): boolean, cancel: fun(), approve: fun(), review: fun(checkpoint: string), idle?: fun() }
function M.set_actions(actions)
  window.actions = actions
  handlers.on_idle = actions.idle
end

--- The prompts waiting for the running turn to end, shown under the chat (chat/queue.lua).
M.queue = queue

--- Opens the split (chat above, input below) in the current tab page if it is not there.
---@param opts? { focus?: boolean, insert?: boolean } focus: put the cursor in the input window;
--- insert: and in Insert mode at the end of what it holds, ready to type
function M.open(opts)
  opts = opts or {}
  render.ensure()
  window.open(opts.focus)
  status.render()
  queue.show()
  if opts.focus and opts.insert and vim.api.nvim_get_mode().mode:sub(1, 1) ~= "i" then
    -- Takes effect once the command or mapping that opened the chat has ended.
    vim.cmd.startinsert({ bang = true })
  end
end

--- True when the chat is shown in the current tab page.
---@return boolean
function M.visible()
  return window.buf ~= nil and window.visible()
end

--- Moves the cursor out of the agent's windows (to the previous window, else a new one).
M.leave = window.leave

--- True while a prompt is being worked on (from sending it to `turn_done`).
M.busy = status.busy

--- The state for statuslines: see :help agent-statusline.
---@return agent.Status
function M.status()
  local s = status.current
  return {
    state = s.state,
    text = status.text(),
    input = s.input,
    output = s.output,
    cached = s.cached,
    cost = status.cost(),
    provider = s.provider,
    model = s.model,
  }
end

--- The model the following prompts use was switched to `model`: the status line shows it.
---@param model string
function M.model_switched(model)
  status.current.model = model
  handlers.saw_model(model)
  status.render()
end

--- Notes models the provider offers (for :Agent model's list).
---@param names string[]
function M.offered(names)
  for _, name in ipairs(names) do
    handlers.saw_model(name)
  end
end

--- The models the backend has reported using (the provider's default among them), in order.
---@return string[]
function M.models_seen()
  return vim.deepcopy(handlers.models)
end

--- Shows the user's prompt under `## You`, and its attachments as folded rows under it; the
--- state becomes `thinking`.
M.user_prompt = handlers.user_prompt
M.prompt_count = handlers.prompt_count
M.turn_at = handlers.turn_at
M.branching = handlers.branching

--- Puts prompt `turn`'s text in the input to be edited and sent as a new branch from before
--- it (:help agent-branches); the input says so until it is sent or emptied.
---@param text string
---@param turn integer
function M.edit_in_input(text, turn)
  M.open({ focus = true })
  window.edit_in_input(text, turn)
end

--- The prompt the input's text is to branch from (its number), when it holds an edited
--- prompt; nil else. Taking it forgets it.
---@return integer?
function M.take_editing()
  return window.take_editing()
end

--- The prompt the input's text is to branch from, left as it is.
---@return integer?
function M.editing()
  return window.editing()
end
--- Counts `cost` dollars spent outside a turn (a side question) in the conversation's cost.
---@param cost number
function M.spent(cost)
  local s = status.current
  s.spent, s.costed = (s.spent or 0) + cost, true
  status.render()
end

--- The prompt (from 1) whose block holds chat row `row` (0-based), or nil.
M.prompt_at = handlers.prompt_at

--- Called with the input buffer when it is made (and at once if it exists): what the input's
--- completion needs, set by require("agent") (the chat never requires agent.context).
---@param fn fun(buf: integer)
function M.on_input(fn)
  window.on_input_buffer = fn
  if window.input_buf and vim.api.nvim_buf_is_valid(window.input_buf) then
    fn(window.input_buf)
  end
end

--- Shows an error (highlighted) in the chat, and through vim.notify when the chat is not
--- visible.
M.error = handlers.error

--- Says `message` where the person looks: a dimmed line in the chat when it is shown (a
--- message at the bottom would be drawn over by `-- INSERT --` while they type in the input),
--- else through vim.notify at `level`.
---@param message string
---@param level? integer vim.log.levels (default INFO)
function M.say(message, level)
  if not M.visible() then
    vim.notify(message, level or vim.log.levels.INFO)
    return
  end
  handlers.handlers.notice({ text = message })
  render.write()
end

--- Clears the conversation (`:Agent new`). What is left of a turn that was running (the
--- backend cancels it) is not shown in the fresh chat.
---@param running boolean whether a backend runs (the state becomes idle, else off)
---@param fresh? boolean a new conversation follows (not a resumed one): its first line says the
--- provider and model it will use
function M.clear(running, fresh)
  handlers.clear(fresh)
  render.clear()
  local s = status.current
  s.input, s.output, s.turn = 0, 0, false
  s.spent, s.priced, s.costed, s.cost = 0, true, false, nil
  s.prompted = false -- no conversation until the next prompt (the statusline is empty)
  s.resuming = nil
  status.set(running and "idle" or "off")
  if fresh and running then
    handlers.intro()
  end
end

--- The conversation was named (or renamed): the winbar says it when several are live.
---@param name string
function M.named(name)
  status.name = name
  status.render()
end

--- `:Agent compact` was sent: the winbar says so until the backend is idle again.
function M.compacting()
  status.set("compacting")
end

--- `resume` was sent: the saved conversation is being shown again. Busy until the backend is
--- idle, so a prompt typed meanwhile is queued behind it, as behind a turn.
function M.resuming()
  status.current.resuming = true
  status.render()
end

--- Holds buffer writes and winbar redraws until end_batch(), so one batch of events is one
--- buffer call.
function M.begin_batch()
  render.begin_batch()
  status.hold(true)
end

--- Writes what the batch queued, and the winbar if it changed.
function M.end_batch()
  render.end_batch()
  status.hold(false)
end

--- The backend was started: `idle` until a prompt is sent.
function M.backend_started()
  if status.current.state == "off" then
    status.set("idle")
  end
end

--- The backend was stopped on purpose. Queued prompts go back into the input.
function M.backend_stopped()
  status.current.turn = false
  status.current.resuming = nil
  status.set("off")
  queue.back_to_input(queue.clear())
end

--- The backend exited by itself: say so in the chat; the next prompt starts a new one. Queued
--- prompts go back into the input.
---@param message string
function M.backend_exited(message)
  status.current.turn = false
  status.set("off")
  M.error(message)
  queue.back_to_input(queue.clear())
end

--- Shows one event from the backend (see src/front/nvim/protocol.rs, UiEvent).
---@param event table
---@return boolean handled false when the chat has no handler for its type
M.handle = handlers.handle

return M
