--- Side questions (`:Agent btw {question}`, `/btw`): asked of the model with the conversation's
--- context and answered in a float, apart from the conversation: neither the question nor the
--- answer joins it, no tool runs, and the answer's cost is said. `q` (or <Esc>) closes the float,
--- `y` (`keymaps.btw.to_input`) puts the answer in the chat's input.

local M = {}
local H = {}

H.ns = vim.api.nvim_create_namespace("agent.side")
H.next = 0
--- The side questions asked and not answered yet: what each counts its cost with, by number.
---@type table<integer, table>
H.asked = {}
--- The open side question: its number, the float, what it holds.
---@type { id: integer, buf: integer, win: integer, answer: string, done: boolean, deps: table }?
H.open = nil

--- Asks `question` apart from the conversation, acting for the conversation it is asked from;
--- without one, asks for it. `deps`, given by the public API: `ensure` starts the backend,
--- `to_input` puts text in the chat's input, `spent` counts a cost in the conversation's.
---@param question? string
---@param deps { ensure: fun(): boolean, to_input: fun(text: string), spent: fun(cost: number) }
---@return boolean asked
function M.ask(question, deps)
  question = vim.trim(question or "")
  if question == "" then
    require("agent.text").ask_for("agent: a side question (not added to the conversation): ", function(text)
      M.ask(text, deps)
    end)
    return false
  end
  if not deps.ensure() then
    return false
  end
  H.next = H.next + 1
  H.asked[H.next] = deps
  H.show(H.next, question, deps)
  local wire = require("agent.rpc.wire")
  if not wire.notify(wire.method.BTW, { id = H.next, question = question }) then
    H.close()
    return false
  end
  return true
end

--- A `btw_*` event from the backend (rpc/init.lua hands them here).
---@param event table
function M.on_event(event)
  -- Paid for whether or not its float is still open.
  local deps = H.asked[event.id]
  if event.type == "btw_done" then
    H.asked[event.id] = nil
    if deps and tonumber(event.cost) then
      deps.spent(tonumber(event.cost))
    end
  end
  local open = H.open
  if not open or open.id ~= event.id or not vim.api.nvim_buf_is_valid(open.buf) then
    return -- closed meanwhile: the answer is not wanted
  end
  if event.type == "btw_text" then
    open.answer = open.answer .. tostring(event.text or "")
    H.render(open)
  elseif event.type == "btw_done" then
    open.done = true
    open.footer = tostring(event.message or "")
    open.failed = not event.ok
    H.render(open)
  end
end

--- The open float's answer so far (tests); nil when none is open.
---@return { answer: string, done: boolean }?
function M.current()
  local open = H.open
  return open and { answer = open.answer, done = open.done } or nil
end

function H.show(id, question, deps)
  H.close()
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].filetype = "markdown"
  local win = require("agent.float").centered(buf, {
    width = math.max(30, math.min(90, vim.o.columns - 8)),
    height = math.max(5, math.floor(vim.o.lines * 0.5)),
    title = " agent: a side question · not added to the conversation ",
    zindex = 60,
  })
  vim.wo[win].linebreak = true
  H.open = { id = id, buf = buf, win = win, question = question, answer = "", done = false, deps = deps }
  local keys = require("agent.config").options.keymaps.btw
  local function map(lhs, fn, desc)
    if lhs then
      vim.keymap.set("n", lhs, fn, { buffer = buf, nowait = true, desc = "agent: " .. desc })
    end
  end
  map("q", H.close, "close the side question")
  map("<Esc>", H.close, "close the side question")
  map(keys.to_input, function()
    local open = H.open
    if not open or open.answer == "" then
      vim.notify("agent: no answer yet", vim.log.levels.INFO)
      return
    end
    local text = vim.trim(open.answer)
    H.close()
    deps.to_input(text)
  end, "put the answer in the chat's input")
  map("?", function()
    require("agent.keyhelp").show(buf, "side question")
  end, "list these keys")
  vim.api.nvim_create_autocmd("WinClosed", {
    pattern = tostring(win),
    once = true,
    callback = function()
      if H.open and H.open.win == win then
        H.open = nil
      end
    end,
  })
  H.render(H.open)
end

function H.render(open)
  local lines = { "**" .. open.question:gsub("\n", " ") .. "**", "" }
  if open.answer == "" and not open.done then
    lines[#lines + 1] = "_asking…_"
  else
    vim.list_extend(lines, vim.split(open.answer, "\n", { plain = true }))
  end
  if open.done then
    local keys = require("agent.config").options.keymaps.btw
    lines[#lines + 1] = ""
    local tail = open.failed and open.footer
      or ("%s · %sq closes"):format(
        open.footer,
        keys.to_input and (keys.to_input .. " puts it in the input · ") or ""
      )
    lines[#lines + 1] = tail
  end
  vim.bo[open.buf].modifiable = true
  vim.api.nvim_buf_set_lines(open.buf, 0, -1, false, lines)
  vim.bo[open.buf].modifiable = false
  vim.api.nvim_buf_clear_namespace(open.buf, H.ns, 0, -1)
  if open.done then
    vim.api.nvim_buf_set_extmark(open.buf, H.ns, #lines - 1, 0, {
      end_col = #lines[#lines],
      hl_group = open.failed and "AgentError" or "AgentNotice",
    })
  end
end

function H.close()
  local open = H.open
  H.open = nil
  if open and vim.api.nvim_win_is_valid(open.win) then
    pcall(vim.api.nvim_win_close, open.win, true)
  end
end

return M
