--- An external agent's questions (ACP `elicitation/create`): a form to fill in, or a URL to open.
--- Each is a float the person reviews before anything is sent: a form shows every field with its
--- value (defaults filled in, required ones marked `*`), `<CR>` changes the one under the cursor,
--- `a` accepts (once every required field has a value), `d` declines, `q` or `<Esc>` cancels. A
--- URL question shows the page's host apart, then the whole URL; `o` opens it (`vim.ui.open`) and
--- accepts, `y` copies it.
---
--- Like the approval picker it never takes focus from a person typing (insert mode, a command
--- line, or a key pressed in the last `approval.typing` ms): it is then shown in the top right
--- corner, and `keymaps.approve` or `:Agent approve` goes to it. Once it has focus its keys do
--- nothing for `approval.delay` ms. Questions that arrive while one is open wait their turn.
---
--- The backend awaits the answer (`elicit_answer`, matched by the question's id); every string
--- shown was made visible by it (src/front/nvim/protocol.rs, `UiEvent::Elicitation`).

local M = {}
local H = {}

--- A question as the backend sends it.
---@class agent.Elicitation
---@field id integer
---@field conversation integer
---@field agent string
---@field message string
---@field mode "form"|"url"
---@field title? string form
---@field description? string form
---@field fields? agent.ElicitField[] form
---@field url? string url
---@field host? string url

---@class agent.ElicitField
---@field name string
---@field title string
---@field description? string
---@field required boolean
---@field default? any
---@field kind "text"|"number"|"boolean"|"choice"|"many"
---@field min? number
---@field max? number
---@field integer? boolean
---@field format? string
---@field options? { value: string, title: string }[]

--- Waiting questions, the shown one first, each with its callback and the values chosen so far.
---@type { req: agent.Elicitation, answer: fun(action: string, content?: table), values: table<string, any> }[]
H.queue = {}

--- The open float: { win, buf, rows (line -> field index), focused, armed, origin }.
H.open = nil

H.ns = vim.api.nvim_create_namespace("agent.elicit")

--- A value from the backend, nil for msgpack's nil.
local function given(v)
  if v == nil or v == vim.NIL then
    return nil
  end
  return v
end

--- Asks the person `req`; `answer` is called exactly once (`accept` with the values, `decline`
--- or `cancel`), unless the backend closes the question first (`M.close`).
---@param req agent.Elicitation
---@param answer fun(action: string, content?: table)
function M.ask(req, answer)
  local values = {}
  for _, field in ipairs(req.fields or {}) do
    values[field.name] = given(field.default)
  end
  table.insert(H.queue, { req = req, answer = answer, values = values })
  if not H.open then
    H.show_next()
  end
end

--- Closes question `id` without an answer (its turn ended, or the agent said it is complete).
---@param id integer
function M.close(id)
  for i, item in ipairs(H.queue) do
    if item.req.id == id then
      table.remove(H.queue, i)
      if i == 1 then
        H.close_float()
        H.show_next()
      end
      return
    end
  end
end

--- Cancels every question of `conversation` (it was closed, or started anew).
---@param conversation integer
function M.dismiss(conversation)
  for i = #H.queue, 1, -1 do
    local item = H.queue[i]
    if item.req.conversation == conversation then
      M.close(item.req.id)
      item.answer("cancel")
    end
  end
end

--- Closes every question without an answer: the backend that asked them is gone.
function M.forget_all()
  H.queue = {}
  H.close_float()
end

--- Whether a question waits for the person.
---@return boolean
function M.waiting()
  return #H.queue > 0
end

--- Goes to the shown question (`keymaps.approve`, `:Agent approve`); its keys arm after
--- `approval.delay` ms.
function M.focus()
  local open = H.open
  if not open or not vim.api.nvim_win_is_valid(open.win) then
    return
  end
  if not open.focused then
    H.take_focus(open)
  else
    vim.api.nvim_set_current_win(open.win)
  end
end

--- For tests: the open float's window and buffer, and whether it has focus and takes keys.
---@return { win: integer, buf: integer, focused: boolean, armed: boolean }?
function M.shown()
  local open = H.open
  return open and { win = open.win, buf = open.buf, focused = open.focused, armed = open.armed } or nil
end

--- A field's value as shown.
function H.shown_value(field, value)
  if value == nil then
    return "—"
  elseif field.kind == "boolean" then
    return value and "yes" or "no"
  elseif field.kind == "choice" or field.kind == "many" then
    local titles = {}
    for _, v in ipairs(field.kind == "many" and value or { value }) do
      for _, option in ipairs(field.options or {}) do
        if option.value == v then
          titles[#titles + 1] = option.title
        end
      end
    end
    return #titles > 0 and table.concat(titles, ", ") or "—"
  end
  return tostring(value)
end

--- What a field says under its value: its description, else its bounds or format.
function H.hint(field)
  local parts = {}
  if given(field.description) then
    parts[#parts + 1] = field.description
  end
  local min, max = given(field.min), given(field.max)
  if field.kind == "number" and (min or max) then
    parts[#parts + 1] = ("%s to %s"):format(min and tostring(min) or "any", max and tostring(max) or "any")
  elseif field.kind == "text" and given(field.format) then
    parts[#parts + 1] = field.format
  elseif field.kind == "choice" or field.kind == "many" then
    local titles = vim.tbl_map(function(o)
      return o.title
    end, field.options or {})
    parts[#parts + 1] = (field.kind == "many" and "any of: " or "one of: ") .. table.concat(titles, ", ")
  end
  return table.concat(parts, " · ")
end

--- The most lines of the agent's words a float shows.
H.MAX_MESSAGE_LINES = 12

--- The float's lines, their highlights, and which line shows which field. What the person
--- decides on comes first (a URL's host and the URL itself), then the agent's words, each
--- line marked `│` so that none can pass for a field or the host line.
function H.lines(item)
  local req = item.req
  local lines, marks, rows = {}, {}, {}
  if req.mode == "url" then
    lines[#lines + 1] = "opens a page on  " .. tostring(req.host)
    marks[#marks + 1] = { #lines - 1, #"opens a page on  ", -1, "AgentElicitHost" }
    lines[#lines + 1] = tostring(req.url)
    marks[#marks + 1] = { #lines - 1, 0, -1, "Comment" }
    lines[#lines + 1] = ""
  end
  local said = {}
  for _, text in ipairs({ given(req.title) or false, tostring(req.message), given(req.description) or false }) do
    if type(text) == "string" then
      for line in (text .. "\n"):gmatch("(.-)\n") do
        said[#said + 1] = line
      end
    end
  end
  local shown = math.min(#said, H.MAX_MESSAGE_LINES)
  for i = 1, shown do
    lines[#lines + 1] = "│ " .. said[i]
    marks[#marks + 1] = { #lines - 1, 0, #"│ ", "FloatBorder" }
  end
  if #said > shown then
    lines[#lines + 1] = ("│ … (%d more lines)"):format(#said - shown)
    marks[#marks + 1] = { #lines - 1, 0, -1, "Comment" }
  end
  if req.mode == "url" then
    return lines, marks, rows
  end
  lines[#lines + 1] = ""
  local width = 0
  for _, field in ipairs(req.fields or {}) do
    width = math.max(width, vim.fn.strdisplaywidth(field.title) + (field.required and 2 or 0))
  end
  for i, field in ipairs(req.fields or {}) do
    local label = field.title .. (field.required and " *" or "")
    local pad = string.rep(" ", width - vim.fn.strdisplaywidth(label))
    local line = ("  %s%s   %s"):format(label, pad, H.shown_value(field, item.values[field.name]))
    lines[#lines + 1] = line
    rows[#lines] = i
    marks[#marks + 1] = { #lines - 1, 2, 2 + #label, "AgentElicitField" }
    local hint = H.hint(field)
    if hint ~= "" then
      lines[#lines + 1] = "    " .. hint
      marks[#marks + 1] = { #lines - 1, 0, -1, "Comment" }
    end
  end
  return lines, marks, rows
end

function H.footer(item, open)
  if open and not open.focused then
    local key = require("agent.config").options.keymaps.approve
    return key and (" %s or :Agent approve: go to it "):format(key) or " :Agent approve: go to it "
  end
  if open and not open.armed then
    return " a moment… "
  end
  if item.req.mode == "url" then
    return " o: open it · y: copy · d: decline · q: cancel "
  end
  return " <CR>: change · a: accept · d: decline · q: cancel "
end

--- Draws the first question's float again (its values changed, or it took focus).
function H.draw()
  local open, item = H.open, H.queue[1]
  if not open or not item or not vim.api.nvim_buf_is_valid(open.buf) then
    return
  end
  local lines, marks, rows = H.lines(item)
  open.rows = rows
  vim.bo[open.buf].modifiable = true
  vim.api.nvim_buf_set_lines(open.buf, 0, -1, false, lines)
  vim.bo[open.buf].modifiable = false
  vim.api.nvim_buf_clear_namespace(open.buf, H.ns, 0, -1)
  for _, mark in ipairs(marks) do
    local row, from, to, group = unpack(mark)
    vim.api.nvim_buf_set_extmark(open.buf, H.ns, row, from, {
      end_row = to == -1 and row + 1 or row,
      end_col = to == -1 and 0 or to,
      hl_group = group,
    })
  end
  if vim.api.nvim_win_is_valid(open.win) then
    vim.api.nvim_win_set_config(open.win, H.layout(lines, item, open))
    -- Wrapped lines count: every one of them on screen, the editor allowing.
    local ok, height = pcall(vim.api.nvim_win_text_height, open.win, {})
    if ok and type(height) == "table" and height.all then
      vim.api.nvim_win_set_height(open.win, math.max(1, math.min(height.all, vim.o.lines - 5)))
    end
  end
end

--- Where the float goes: centred when it has focus, else in the top right corner, away from
--- what the person types.
function H.layout(lines, item, open)
  local width = 20
  for _, line in ipairs(lines) do
    width = math.max(width, vim.fn.strdisplaywidth(line))
  end
  local footer = H.footer(item, open)
  width = math.min(math.max(width, vim.fn.strdisplaywidth(footer)) + 2, math.max(20, vim.o.columns - 4))
  local height = math.max(1, math.min(#lines, vim.o.lines - 5))
  local focused = open and open.focused
  local config = {
    relative = "editor",
    width = width,
    height = height,
    row = focused and math.max(0, math.floor((vim.o.lines - height) / 2) - 1) or 1,
    col = focused and math.max(0, math.floor((vim.o.columns - width) / 2)) or math.max(0, vim.o.columns - width - 2),
    title = (" %s asks "):format(item.req.agent),
    title_pos = "center",
    footer = footer,
    footer_pos = "center",
  }
  return config
end

function H.show_next()
  local item = H.queue[1]
  if not item then
    return
  end
  local ok, err = pcall(H.show, item)
  if not ok then
    -- Never a float nobody can answer: the agent is told `cancel`, and the next one shows.
    vim.notify(("agent: %s's question could not be shown (%s)"):format(item.req.agent, err), vim.log.levels.ERROR)
    H.answer(item, "cancel")
  end
end

function H.show(item)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].filetype = "agent-elicit"
  -- A URL question never takes focus by itself: its `o` opens a page, and `o` is a key
  -- people press without looking. A form takes it when the person is not typing.
  local focus = item.req.mode ~= "url" and not require("agent.keys").typing()
  local open = { buf = buf, focused = false, armed = false, rows = {} }
  H.open = open
  local lines = H.lines(item)
  local config = H.layout(lines, item, open)
  config.style = "minimal"
  config.border = "rounded"
  config.zindex = 60
  open.win = vim.api.nvim_open_win(buf, false, config)
  vim.wo[open.win].wrap = true
  vim.wo[open.win].showbreak = "↪ " -- a wrapped row is never mistaken for a line of its own
  vim.wo[open.win].cursorline = true
  H.map_keys(buf, open)
  H.draw()
  if focus then
    H.take_focus(open)
  end
  local group = vim.api.nvim_create_augroup("agent.elicit", { clear = true })
  vim.api.nvim_create_autocmd("VimResized", {
    group = group,
    callback = function()
      H.draw()
    end,
  })
  vim.api.nvim_create_autocmd("WinEnter", {
    group = group,
    callback = function()
      -- Gone to by hand (a click, <C-w>w): it has focus as if asked for.
      if H.open == open and not open.focused and vim.api.nvim_get_current_win() == open.win then
        open.origin = vim.fn.win_getid(vim.fn.winnr("#"))
        H.take_focus(open)
      end
    end,
  })
  vim.api.nvim_create_autocmd("WinClosed", {
    group = group,
    pattern = tostring(open.win),
    callback = function()
      -- Closed some other way than by an answer (:q, :only): a cancel.
      if H.open == open and H.queue[1] == item then
        vim.schedule(function()
          H.answer(item, "cancel")
        end)
      end
    end,
  })
end

function H.take_focus(open)
  if not vim.api.nvim_win_is_valid(open.win) then
    return
  end
  if not open.origin then
    open.origin = vim.api.nvim_get_current_win()
    open.insert = vim.api.nvim_get_mode().mode:sub(1, 1) == "i"
  end
  open.focused = true
  open.armed = false
  if vim.api.nvim_get_mode().mode:sub(1, 1) == "i" then
    vim.cmd.stopinsert()
  end
  vim.api.nvim_set_current_win(open.win)
  local first = nil
  for row in pairs(open.rows) do
    first = math.min(first or row, row)
  end
  if first then
    pcall(vim.api.nvim_win_set_cursor, open.win, { first, 0 })
  end
  H.draw()
  vim.defer_fn(function()
    if H.open == open then
      open.armed = true
      H.draw()
    end
  end, require("agent.config").options.approval.delay)
end

function H.close_float()
  local open = H.open
  H.open = nil
  pcall(vim.api.nvim_del_augroup_by_name, "agent.elicit")
  if not open then
    return
  end
  if vim.api.nvim_win_is_valid(open.win) then
    pcall(vim.api.nvim_win_close, open.win, true)
  end
  if open.origin and vim.api.nvim_win_is_valid(open.origin) then
    pcall(vim.api.nvim_set_current_win, open.origin)
    if open.insert then
      vim.cmd.startinsert({ bang = true }) -- back to typing, where they were
    end
  end
end

--- Answers the shown question and shows the next.
function H.answer(item, action, content)
  if H.queue[1] ~= item then
    return
  end
  table.remove(H.queue, 1)
  H.close_float()
  item.answer(action, content)
  H.show_next()
end

--- What is missing or out of bounds before the form can be sent, or nil.
function H.problem(item)
  for _, field in ipairs(item.req.fields or {}) do
    local value = item.values[field.name]
    local empty = value == nil or value == "" or (field.kind == "many" and #value == 0)
    if field.required and empty then
      return ("fill in %s first"):format(field.title)
    end
    if not empty and field.kind == "many" then
      local min, max = given(field.min), given(field.max)
      if (min and #value < min) or (max and #value > max) then
        return ("%s takes %s to %s choices"):format(field.title, min or 0, max or "any")
      end
    end
    if not empty and field.kind == "number" then
      local min, max = given(field.min), given(field.max)
      if (min and value < min) or (max and value > max) then
        return ("%s takes %s to %s"):format(field.title, min or "any", max or "any")
      end
    end
    if not empty and field.kind == "text" then
      local length = vim.fn.strchars(value)
      local min, max = given(field.min), given(field.max)
      if (min and length < min) or (max and length > max) then
        return ("%s takes %s to %s characters"):format(field.title, min or 0, max or "any")
      end
    end
  end
  return nil
end

--- Changes the field on the cursor's line.
function H.change(item, open)
  local row = vim.api.nvim_win_get_cursor(open.win)[1]
  local index = open.rows[row] or open.rows[row - 1]
  local field = index and item.req.fields[index]
  if not field then
    return
  end
  local function set(value)
    if H.queue[1] == item then
      item.values[field.name] = value
      H.draw()
      if vim.api.nvim_win_is_valid(open.win) then
        vim.api.nvim_set_current_win(open.win)
      end
    end
  end
  if field.kind == "boolean" then
    set(not item.values[field.name])
  elseif field.kind == "choice" then
    vim.ui.select(field.options or {}, {
      prompt = field.title,
      format_item = function(o)
        return o.title
      end,
    }, function(choice)
      if choice then
        set(choice.value)
      end
    end)
  elseif field.kind == "many" then
    local picked = vim.deepcopy(item.values[field.name] or {})
    vim.ui.select(field.options or {}, {
      prompt = field.title .. " (pick one to add or remove it)",
      format_item = function(o)
        return (vim.tbl_contains(picked, o.value) and "[x] " or "[ ] ") .. o.title
      end,
    }, function(choice)
      if not choice then
        return
      end
      if vim.tbl_contains(picked, choice.value) then
        picked = vim.tbl_filter(function(v)
          return v ~= choice.value
        end, picked)
      else
        picked[#picked + 1] = choice.value
      end
      set(picked)
    end)
  else
    local now = item.values[field.name]
    vim.ui.input({ prompt = field.title .. ": ", default = now ~= nil and tostring(now) or "" }, function(text)
      if text == nil then
        return
      end
      if field.kind == "text" then
        set(text ~= "" and text or nil)
        return
      end
      if text == "" then
        set(nil)
        return
      end
      local n = tonumber(text)
      local min, max = given(field.min), given(field.max)
      if not n or n ~= n or n == math.huge or n == -math.huge or (field.integer and n ~= math.floor(n)) then
        vim.notify(("agent: %s takes %s"):format(field.title, field.integer and "a whole number" or "a number"))
      elseif (min and n < min) or (max and n > max) then
        vim.notify(("agent: %s takes %s to %s"):format(field.title, min or "any", max or "any"))
      else
        set(n)
      end
    end)
  end
end

function H.map_keys(buf, open)
  local function armed(fn)
    return function()
      local item = H.queue[1]
      if H.open ~= open or not item or not open.armed then
        return
      end
      fn(item)
    end
  end
  local map = function(lhs, fn, desc)
    vim.keymap.set("n", lhs, armed(fn), { buffer = buf, nowait = true, desc = desc })
  end
  map("q", function(item)
    H.answer(item, "cancel")
  end, "cancel the agent's question")
  map("<Esc>", function(item)
    H.answer(item, "cancel")
  end, "cancel the agent's question")
  map("d", function(item)
    H.answer(item, "decline")
  end, "decline the agent's question")
  map("<CR>", function(item)
    if item.req.mode == "form" then
      H.change(item, open)
    end
  end, "change this field")
  map("a", function(item)
    if item.req.mode ~= "form" then
      return
    end
    local problem = H.problem(item)
    if problem then
      vim.notify("agent: " .. problem, vim.log.levels.WARN)
      return
    end
    local content = vim.empty_dict()
    for name, value in pairs(item.values) do
      content[name] = value
    end
    H.answer(item, "accept", content)
  end, "send the form to the agent")
  map("o", function(item)
    if item.req.mode ~= "url" then
      return
    end
    local _, err = vim.ui.open(item.req.url)
    if err then
      vim.notify(("agent: could not open the page (%s); y copies its URL"):format(err), vim.log.levels.ERROR)
      return
    end
    H.answer(item, "accept")
  end, "open the page and tell the agent")
  map("y", function(item)
    if item.req.mode == "url" then
      vim.fn.setreg('"', item.req.url)
      pcall(vim.fn.setreg, "+", item.req.url)
      vim.notify("agent: the URL is copied")
    end
  end, "copy the URL")
end

return M
