--- The prompts sent while the agent was working: kept in order, shown in the input window's
--- winbar (`queued: fix the test · +1 more`), sent one at a time as each turn ends. Whoever
--- sends them is require("agent") (this module sends nothing); it is told through `on_idle`.

-- One copy per conversation (lua/agent/conversations.lua loads it, with the conversation's
-- number); required by name elsewhere, a stand-in for the copy of the conversation acted for.
if type(({ ... })[2]) ~= "number" then
  return require("agent.conversations").stand_in(...)
end

local window = require("agent.chat.window")

local M = {}
local H = {}
H.conversation = select(2, ...) -- the number of the conversation this copy serves

--- The queued prompts, oldest first.
---@type string[]
M.items = {}

--- The context sent after each queued prompt as it is (the ask mapping's lines), by position in
--- M.items (false for none).
---@type (string|false)[]
M.contexts = {}

--- True while the queue waits for the person (`:Agent stop` asking what to do with it): nothing
--- is sent from it meanwhile.
M.held = false

--- Characters of the first queued prompt the winbar quotes.
H.SHOWN_CHARS = 60

--- Adds `prompt` at the end of the queue.
---@param prompt string
---@param context? string
function M.push(prompt, context)
  M.items[#M.items + 1] = prompt
  M.contexts[#M.items] = context or false
  M.show()
end

--- A queued prompt as the input holds it again: with its context after it.
---@param prompt string
---@param context? string|false
---@return string
function M.whole(prompt, context)
  return context and (prompt .. "\n\n" .. context) or prompt
end

--- Takes the oldest queued prompt out (and its context), or nil when there is none.
---@return string? prompt
---@return string? context
function M.pop()
  local prompt = table.remove(M.items, 1)
  local context = table.remove(M.contexts, 1)
  M.show()
  return prompt, context or nil
end

--- Removes the `i`-th queued prompt; returns it.
---@param i integer
---@return string?
function M.remove(i)
  local prompt = table.remove(M.items, i)
  local context = table.remove(M.contexts, i)
  M.show()
  return prompt and M.whole(prompt, context)
end

--- Empties the queue; returns what it held.
---@return string[]
function M.clear()
  local items = {}
  for i, prompt in ipairs(M.items) do
    items[i] = M.whole(prompt, M.contexts[i])
  end
  M.items, M.contexts = {}, {}
  M.show()
  return items
end

--- Puts prompts taken off the queue into the input, after what it holds, and says so (`said`,
--- else that queued prompts were put back).
---@param prompts string[] in the order they were queued
---@param said? string
function M.back_to_input(prompts, said)
  local buf = window.input_buf
  if #prompts == 0 or not (buf and vim.api.nvim_buf_is_valid(buf)) then
    return
  end
  local lines = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  if #lines == 1 and lines[1] == "" then
    lines = {}
  end
  for _, prompt in ipairs(prompts) do
    if #lines > 0 then
      lines[#lines + 1] = ""
    end
    vim.list_extend(lines, vim.split(prompt, "\n", { plain = true }))
  end
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.notify(
    said or ("agent: %d queued prompt%s put back in the input"):format(#prompts, #prompts == 1 and "" or "s"),
    vim.log.levels.INFO
  )
end

--- The line the person sees for a queued prompt: its first line, cut.
---@param prompt string
---@param max? integer
---@return string
function M.label(prompt, max)
  local first = vim.trim(prompt):match("^[^\n]*") or ""
  return require("agent.text").cut(first, max or H.SHOWN_CHARS, true)
end

--- Puts the queue in the winbar of every input window (nothing when it is empty), fitted to
--- the window: the first prompt cut to what room is left, and `:Agent queue` when it fits.
function M.show()
  local buf = window.input_buf
  if not (buf and vim.api.nvim_buf_is_valid(buf)) then
    return
  end
  if #M.items > 0 and not H.refits then
    -- Fitted again when a window's width changes.
    H.refits = vim.api.nvim_create_autocmd({ "WinResized", "VimResized" }, {
      group = vim.api.nvim_create_augroup("agent.chat.queue." .. H.conversation, { clear = true }),
      desc = "agent: fit the queued prompts' winbar to the input window",
      callback = function()
        if #M.items > 0 then
          M.show()
        end
      end,
    })
  end
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    local bar = ""
    if #M.items > 0 then
      local width = vim.api.nvim_win_get_width(win)
      local more = #M.items > 1 and (" · +%d more"):format(#M.items - 1) or ""
      local hint = " :Agent queue "
      local room = width - vim.fn.strdisplaywidth(" queued: " .. more) - 1
      local with_hint = room - #hint >= 20
      local label = M.label(M.items[1], math.max(8, with_hint and room - #hint or room))
      bar = (" queued: %s%s"):format(label, more):gsub("%%", "%%%%")
      if with_hint then
        bar = bar .. "%=" .. hint
      end
    end
    vim.api.nvim_set_option_value("winbar", bar, { win = win, scope = "local" })
  end
end

return M
