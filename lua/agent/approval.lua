--- The approval picker: a centred float that shows exactly what the agent wants to do (the diff of
--- an edit, the new file of a create, the whole command with where and how long it runs) and takes
--- the answer in one key. Requests that arrive while one is open wait in a queue.
---
--- Neovim never waits on the backend: the backend awaits the answer, matched by the request's id,
--- which `on_decide` sends back (`decide`, lua/agent/rpc/init.lua).

local M = {}
local H = {}

---@alias agent.Decision "allow_once"|"allow_session"|"allow_project"|"allow_all"|"edited"|"refuse"

--- An approval request as the backend sends it (src/front/nvim/protocol.rs, UiEvent::Approval). Every
--- string in it was made visible by the backend (src/display.rs); absent fields are nil.
---@class agent.ApprovalRequest
---@field id integer
---@field tool string
---@field title string the float's title
---@field preview agent.ApprovalPreview
---@field choices agent.ApprovalChoices

--- What the preview shows: a diff, a command (its lines, blank runs as markers, where it runs and,
--- for the built-in run_bash, its timeout), or nothing but the title.
---@class agent.ApprovalPreview
---@field kind "diff"|"command"|"none"
---@field path? string diff: the file
---@field unified? string diff: its lines
---@field command? string command: its lines
---@field cwd? string command: where it runs
---@field timeout? number command: seconds it may run (nil for an external agent's command)

--- The choices and their labels, from the backend: the built-in tools' five (`key` names the
--- entry of `keymaps.approval` that picks it), or an external agent's own options (ACP).
---@class agent.ApprovalChoices
---@field kind "builtin"|"agent"
---@field choices? { key: string, label: string }[] builtin
---@field options? { id: string, name: string, kind: string }[] agent
---@field cancel? string agent: the label of Esc's choice when no option rejects
---@field edit? string agent: the label of "Edit before allowing", when the agent's edit can be changed

--- Queued requests, the one shown first, each with its callback (`text`: the person's version,
--- with the decision `edited`).
---@type { req: agent.ApprovalRequest, on_decide: fun(decision: agent.Decision, reason?: string, option?: string, text?: string) }[]
H.queue = {}

--- The request whose proposal the person is changing ("Edit before allowing"); the picker is
--- closed meanwhile, and shows it again if they go back.
H.editing = nil

--- The open picker: its windows, buffers and where focus came from.
H.open = nil

H.ns = vim.api.nvim_create_namespace("agent.approval")

--- Asks the user about `req` and calls `on_decide` exactly once with the answer. Closing the
--- picker any other way than by a choice refuses.
---@param req agent.ApprovalRequest
---@param on_decide fun(decision: agent.Decision, reason?: string, option?: string, text?: string)
---@param proposal? fun(): table?, string? fetches what "Edit before allowing" changes (the
--- backend's `proposal` request); nil: the request cannot be edited
function M.ask(req, on_decide, proposal)
  table.insert(H.queue, { req = req, on_decide = on_decide, proposal = proposal })
  if H.open then
    H.set_title()
  elseif not H.editing then
    H.show_next()
  end
end

--- Closes the picker and forgets every waiting request without answering them (the backend
--- cancelled them: a cancelled turn or a new conversation).
function M.dismiss_all()
  H.queue = {}
  H.close()
  if H.editing then
    H.editing = nil
    require("agent.proposal").close()
  end
end

--- How many requests wait, the shown one included.
---@return integer
function M.pending()
  return #H.queue
end

--- An external agent's own permission options (ACP), shown by their names in the agent's order:
--- keys 1..n, y picks the first allow option, n and <Esc> the first reject option (or the
--- backend's `cancel` choice when it offers none).
function H.agent_choices(options, cancel)
  local choices = {}
  local first_allow, first_reject
  for i, option in ipairs(options) do
    local allow = option.kind == "allow_once" or option.kind == "allow_always"
    local choice = {
      digit = i <= 9 and tostring(i) or nil,
      label = tostring(option.name or option.id),
      decision = ({ allow_once = "allow_once", allow_always = "allow_session" })[option.kind] or "refuse",
      option = option.id,
    }
    if allow and not first_allow and option.kind == "allow_once" then
      first_allow = choice
    elseif not allow and not first_reject then
      first_reject = choice
    end
    choices[#choices + 1] = choice
  end
  first_allow = first_allow or choices[1]
  if first_allow then
    first_allow.key = "allow_once"
  end
  if first_reject then
    first_reject.key = "refuse"
  else
    choices[#choices + 1] = { key = "refuse", label = cancel, decision = "refuse" }
  end
  -- Allow once (or the first option) first, so a stray <CR> never grants more than once.
  for i, choice in ipairs(choices) do
    if choice == first_allow and i > 1 then
      table.remove(choices, i)
      table.insert(choices, 1, choice)
      break
    end
  end
  return choices
end

--- True when an external agent offers the choices (its own options, its own keys).
---@param req agent.ApprovalRequest
function H.from_agent(req)
  return req.choices.kind == "agent"
end

--- The choices, in order, with the labels the backend sent. `key` names the entry of
--- `keymaps.approval` that picks it; `reason` asks for one before refusing.
---@param req agent.ApprovalRequest
function H.choices(req)
  if H.from_agent(req) then
    local choices = H.agent_choices(req.choices.options or {}, req.choices.cancel or "")
    -- "Edit before allowing" an agent's edit: the person's version, allowed once.
    local allow_once
    for _, choice in ipairs(choices) do
      if choice.key == "allow_once" and choice.option then
        allow_once = choice.option
      end
    end
    if req.choices.edit and allow_once then
      table.insert(choices, 2, {
        key = "edit",
        label = tostring(req.choices.edit),
        decision = "edited",
        edit = true,
        option = allow_once,
      })
    end
    return choices
  end
  local choices = {}
  for _, choice in ipairs(req.choices.choices or {}) do
    local with_reason = choice.key == "refuse_with_reason"
    choices[#choices + 1] = {
      key = choice.key,
      label = choice.label,
      decision = with_reason and "refuse" or choice.key,
      reason = with_reason,
      edit = choice.key == "edit",
    }
  end
  return choices
end

--- The preview's lines.
---@param preview agent.ApprovalPreview
---@return string[] lines
function H.preview_lines(preview)
  local text = preview.kind == "command" and preview.command or preview.kind == "diff" and preview.unified or ""
  if text == "" then
    return { "(no preview)" }
  end
  local lines = require("agent.text").split(text)
  if preview.kind == "diff" and lines[#lines] == "" then
    table.remove(lines)
  end
  return lines
end

--- Where and how long a command runs, for the preview's bottom border (never scrolled away),
--- with `cwd` for the directory; nil for any other preview.
---@param preview agent.ApprovalPreview
---@param cwd string
---@return string?
function H.where(preview, cwd)
  if preview.kind ~= "command" then
    return nil
  elseif preview.timeout then
    return ("in %s · timeout %ss"):format(cwd, H.number(preview.timeout))
  end
  return ("in %s"):format(cwd)
end

function H.number(n)
  n = tonumber(n) or 0
  return n == math.floor(n) and tostring(math.floor(n)) or tostring(n)
end

--- The highlight of a diff line, by its first characters.
function H.diff_group(line)
  local c = line:sub(1, 1)
  if line:sub(1, 3) == "+++" or line:sub(1, 3) == "---" or c == "@" then
    return "AgentDiffHeader"
  elseif c == "+" then
    return "AgentDiffAdd"
  elseif c == "-" then
    return "AgentDiffDelete"
  end
end

--- Highlights only the lines being drawn, so a 20,000-line diff costs what its screenful does.
vim.api.nvim_set_decoration_provider(H.ns, {
  on_win = function(_, _, buf)
    return H.open ~= nil and buf == H.open.preview_buf and H.open.is_diff
  end,
  on_line = function(_, _, buf, row)
    local line = vim.api.nvim_buf_get_lines(buf, row, row + 1, false)[1]
    local group = line and H.diff_group(line)
    if group then
      vim.api.nvim_buf_set_extmark(buf, H.ns, row, 0, {
        end_row = row + 1,
        hl_group = group,
        hl_eol = true,
        ephemeral = true,
      })
    end
  end,
})

function H.scratch(name)
  local buf = vim.api.nvim_create_buf(false, true)
  vim.bo[buf].bufhidden = "wipe"
  vim.bo[buf].swapfile = false
  pcall(vim.api.nvim_buf_set_name, buf, name)
  return buf
end

--- Where the two floats go: the preview on top, the choices right below, centred together.
function H.layout(preview_lines, choice_lines)
  local columns, rows = vim.o.columns, vim.o.lines - vim.o.cmdheight
  local widest = 40
  -- The first screenfuls decide the width: measuring 40,000 diff lines would cost more than
  -- showing them.
  for i = 1, math.min(#preview_lines, 500) do
    widest = math.max(widest, vim.api.nvim_strwidth(preview_lines[i]))
  end
  for _, line in ipairs(choice_lines) do
    widest = math.max(widest, vim.api.nvim_strwidth(line))
  end
  local width = math.max(math.min(60, columns - 4), math.min(widest + 2, columns - 4, 120))
  local choices_height = #choice_lines
  -- Borders: 2 rows around each float.
  local room = math.max(1, rows - choices_height - 4 - 2)
  -- The preview wraps: count the screen rows its first lines take.
  local wrapped = 0
  for i = 1, #preview_lines do
    if wrapped >= room then
      break
    end
    wrapped = wrapped + math.max(1, math.ceil(vim.api.nvim_strwidth(preview_lines[i]) / width))
  end
  local preview_height = math.max(1, math.min(wrapped, room))
  local total = preview_height + choices_height + 4
  local row = math.max(0, math.floor((rows - total) / 2))
  local col = math.max(0, math.floor((columns - width - 2) / 2))
  return {
    preview = { row = row, col = col, width = width, height = preview_height },
    choices = { row = row + preview_height + 2, col = col, width = width, height = choices_height },
  }
end

--- The keys that pick `choice`: from `keymaps.approval` for our own choices; for an external
--- agent's options, their digit, plus y for the first allow and n/<Esc> for the first reject.
function H.keys_for(choice, req)
  if H.from_agent(req) and not choice.edit then
    local out = { choice.digit }
    if choice.key == "allow_once" then
      table.insert(out, "y")
    elseif choice.key == "refuse" then
      vim.list_extend(out, { "n", "<Esc>" })
    end
    return out
  end
  return vim.deepcopy(require("agent.config").options.keymaps.approval[choice.key] or {})
end

function H.choice_lines(choices, req)
  local select = require("agent.config").options.keymaps.approval.select
  local lines = {}
  for i, choice in ipairs(choices) do
    local shown = H.keys_for(choice, req)
    if i == 1 then
      table.insert(shown, select)
    end
    lines[#lines + 1] = ("%-10s %s"):format(table.concat(shown, "/"), choice.label)
  end
  return lines
end

function H.show_next()
  local item = H.queue[1]
  if not item then
    return
  end
  local req = item.req
  local choices = H.choices(req)
  local preview = H.preview_lines(req.preview)
  local choice_lines = H.choice_lines(choices, req)
  local place = H.layout(preview, choice_lines)

  local origin = {
    win = vim.api.nvim_get_current_win(),
    mode = vim.api.nvim_get_mode().mode,
    cursor = vim.api.nvim_win_get_cursor(0),
  }
  local preview_buf = H.scratch("agent://approval-preview")
  vim.api.nvim_buf_set_lines(preview_buf, 0, -1, false, preview)
  vim.bo[preview_buf].modifiable = false
  -- What the preview is, for statuslines and tests: "diff", "command" or "none".
  vim.b[preview_buf].agent_preview = req.preview.kind
  local choices_buf = H.scratch("agent://approval")
  vim.api.nvim_buf_set_lines(choices_buf, 0, -1, false, choice_lines)
  vim.bo[choices_buf].modifiable = false
  vim.bo[choices_buf].filetype = "agent-approval"
  for i, line in ipairs(choice_lines) do
    local keys_end = #line:match("^%S*")
    vim.api.nvim_buf_set_extmark(choices_buf, H.ns, i - 1, 0, { end_col = keys_end, hl_group = "AgentApprovalKey" })
  end

  local preview_win = vim.api.nvim_open_win(preview_buf, false, {
    relative = "editor",
    row = place.preview.row,
    col = place.preview.col,
    width = place.preview.width,
    height = place.preview.height,
    style = "minimal",
    border = "rounded",
    title = " " .. tostring(req.title) .. " ",
    title_pos = "center",
    zindex = 60,
    noautocmd = true,
  })
  -- Wrapped: a line longer than the float is shown whole, never cut off at its right edge.
  vim.wo[preview_win].wrap = true
  vim.wo[preview_win].linebreak = false
  vim.wo[preview_win].winhighlight = "FloatTitle:AgentApprovalTitle"
  local choices_win = vim.api.nvim_open_win(choices_buf, true, {
    relative = "editor",
    row = place.choices.row,
    col = place.choices.col,
    width = place.choices.width,
    height = place.choices.height,
    style = "minimal",
    border = "rounded",
    zindex = 61,
    noautocmd = true,
  })
  vim.wo[choices_win].cursorline = true
  vim.wo[choices_win].winhighlight = "CursorLine:AgentApprovalSelected"
  vim.api.nvim_win_set_cursor(choices_win, { 1, 0 })
  if origin.mode:sub(1, 1) == "i" or origin.mode:sub(1, 1) == "R" then
    vim.cmd.stopinsert()
  end

  H.open = {
    item = item,
    choices = choices,
    origin = origin,
    preview_win = preview_win,
    preview_buf = preview_buf,
    choices_win = choices_win,
    choices_buf = choices_buf,
    is_diff = req.preview.kind == "diff",
    preview_lines = preview,
    choice_lines = choice_lines,
  }
  H.set_title()
  H.set_footer()
  H.map_keys(choices_buf)
  H.watch()
end

--- The preview's title: the request's title (the backend made it visible and says there how many
--- lines a command has), and `1/3` when more wait.
function H.set_title()
  local open = H.open
  if not open or not vim.api.nvim_win_is_valid(open.preview_win) then
    return
  end
  local title = " " .. tostring(open.item.req.title) .. " "
  if #H.queue > 1 then
    title = title .. ("1/%d "):format(#H.queue)
  end
  local config = vim.api.nvim_win_get_config(open.preview_win)
  config.title = title
  config.title_pos = "center"
  vim.api.nvim_win_set_config(open.preview_win, config)
end

--- The preview's bottom border: how many lines are out of sight below (or above) and the key
--- that scrolls to them, whenever the preview is taller than its window, then where a command
--- runs. The count goes first so a narrow float never cuts it.
function H.set_footer()
  local open = H.open
  if not open or not vim.api.nvim_win_is_valid(open.preview_win) then
    return
  end
  local win = open.preview_win
  local keys = require("agent.config").options.keymaps.approval
  local total = vim.api.nvim_buf_line_count(open.preview_buf)
  -- w$ is the last line shown whole: a wrapped line cut off at the bottom still counts as below.
  local top, bottom = vim.fn.line("w0", win), vim.fn.line("w$", win)
  local parts = {}
  if bottom < total then
    local below = total - bottom
    parts[#parts + 1] = ("↓ %d more %s · %s"):format(below, below == 1 and "line" or "lines", keys.scroll_down)
  elseif top > 1 then
    parts[#parts + 1] = ("↑ %d above · %s"):format(top - 1, keys.scroll_up)
  end
  local preview = open.item.req.preview
  local cwd = tostring(preview.cwd or "")
  local components = vim.split(cwd, "/", { plain = true })
  local function footer_with(dir)
    local all = vim.list_extend(vim.list_slice(parts), { H.where(preview, dir) })
    return #all > 0 and (" " .. table.concat(all, " · ") .. " ") or ""
  end
  local footer = footer_with(cwd)
  -- Too wide for the border: the directory loses whole leading components, the count nothing
  -- (Neovim cuts a footer at its end).
  local width = vim.api.nvim_win_get_width(win)
  for first = components[1] == "" and 3 or 2, #components do
    if vim.api.nvim_strwidth(footer) <= width then
      break
    end
    footer = footer_with("…/" .. table.concat(components, "/", first))
  end
  if footer == open.footer then
    return
  end
  open.footer = footer
  local config = vim.api.nvim_win_get_config(win)
  config.footer = footer
  config.footer_pos = "center"
  vim.api.nvim_win_set_config(win, config)
end

function H.map_keys(buf)
  local keys = require("agent.config").options.keymaps.approval
  local function map(lhs, fn, desc)
    vim.keymap.set("n", lhs, fn, { buffer = buf, nowait = true, silent = true, desc = "agent: " .. desc })
  end
  for _, choice in ipairs(H.open.choices) do
    for _, lhs in ipairs(H.keys_for(choice, H.open.item.req)) do
      map(lhs, function()
        H.pick(choice)
      end, choice.label)
    end
  end
  map(keys.select, function()
    local row = vim.api.nvim_win_get_cursor(0)[1]
    H.pick(H.open.choices[row])
  end, "pick the highlighted choice")
  map(keys.scroll_down, function()
    H.scroll("\4")
  end, "scroll the preview down")
  map(keys.scroll_up, function()
    H.scroll("\21")
  end, "scroll the preview up")
end

function H.scroll(key)
  local open = H.open
  if open and vim.api.nvim_win_is_valid(open.preview_win) then
    vim.api.nvim_win_call(open.preview_win, function()
      vim.cmd("normal! " .. key)
    end)
    H.set_footer()
  end
end

--- Re-centres on resize; any other way of closing a window of the picker refuses.
function H.watch()
  local open = H.open
  local group = vim.api.nvim_create_augroup("agent.approval", { clear = true })
  vim.api.nvim_create_autocmd("VimResized", {
    group = group,
    callback = function()
      H.relayout()
    end,
  })
  -- Scrolled some other way (the mouse wheel): the count follows.
  vim.api.nvim_create_autocmd("WinScrolled", {
    group = group,
    pattern = tostring(open.preview_win),
    callback = function()
      H.set_footer()
    end,
  })
  vim.api.nvim_create_autocmd("WinClosed", {
    group = group,
    pattern = { tostring(open.preview_win), tostring(open.choices_win) },
    callback = function()
      vim.schedule(function()
        if H.open == open then
          H.finish("refuse")
        end
      end)
    end,
  })
end

function H.relayout()
  local open = H.open
  if not open then
    return
  end
  local place = H.layout(open.preview_lines, open.choice_lines)
  for _, part in ipairs({ { open.preview_win, place.preview }, { open.choices_win, place.choices } }) do
    local win, where = part[1], part[2]
    if vim.api.nvim_win_is_valid(win) then
      local config = vim.api.nvim_win_get_config(win)
      config.row, config.col, config.width, config.height = where.row, where.col, where.width, where.height
      vim.api.nvim_win_set_config(win, config)
    end
  end
  H.set_footer()
end

function H.pick(choice)
  if not choice or not H.open then
    return
  end
  if choice.edit then
    return H.edit(choice)
  end
  if not choice.reason then
    return H.finish(choice.decision, nil, choice.option)
  end
  local open = H.open
  vim.ui.input({ prompt = "agent: why refuse? (the agent reads this) " }, function(reason)
    if H.open ~= open then
      return
    end
    reason = reason and vim.trim(reason) or ""
    H.finish("refuse", reason ~= "" and reason or nil)
  end)
end

--- "Edit before allowing": the picker closes and the proposal opens for the person to change
--- (lua/agent/proposal.lua); writing it answers `edited` with their version, closing it without
--- writing shows the picker again with the same request.
function H.edit(choice)
  local open = H.open
  local item = open.item
  local proposal, err = nil, "this request cannot be edited"
  if item.proposal then
    proposal, err = item.proposal()
  end
  if not proposal then
    vim.notify(("agent: cannot edit this request: %s"):format(err), vim.log.levels.ERROR)
    return
  end
  H.close(false)
  H.editing = item
  local origin = open.origin
  local handlers = {
    on_write = function(text)
      if H.editing ~= item then
        return
      end
      H.editing = nil
      table.remove(H.queue, 1)
      if vim.api.nvim_win_is_valid(origin.win) then
        pcall(vim.api.nvim_set_current_win, origin.win)
      end
      item.on_decide("edited", nil, choice.option, text)
      if #H.queue > 0 then
        H.show_next()
      end
    end,
    on_quit = function()
      if H.editing ~= item then
        return
      end
      H.editing = nil
      if vim.api.nvim_win_is_valid(origin.win) then
        pcall(vim.api.nvim_set_current_win, origin.win)
      end
      H.show_next()
    end,
  }
  if proposal.kind == "command" then
    require("agent.proposal").command(tostring(proposal.command or ""), handlers)
  else
    require("agent.proposal").file(proposal, handlers)
  end
end

--- Answers the shown request, closes the picker, gives focus back, and shows the next request.
function H.finish(decision, reason, option)
  local open = H.open
  if not open then
    return
  end
  table.remove(H.queue, 1)
  H.close()
  open.item.on_decide(decision, reason, option)
  if #H.queue > 0 then
    H.show_next()
  end
end

--- Closes the picker and gives focus back; `keep_mode` false leaves Normal mode (the proposal
--- opens next, and a key typed there must not go into the file).
function H.close(keep_mode)
  local open = H.open
  if not open then
    return
  end
  H.open = nil
  pcall(vim.api.nvim_del_augroup_by_name, "agent.approval")
  for _, win in ipairs({ open.choices_win, open.preview_win }) do
    if vim.api.nvim_win_is_valid(win) then
      pcall(vim.api.nvim_win_close, win, true)
    end
  end
  if vim.api.nvim_win_is_valid(open.origin.win) then
    pcall(vim.api.nvim_set_current_win, open.origin.win)
    pcall(vim.api.nvim_win_set_cursor, open.origin.win, open.origin.cursor)
    local mode = open.origin.mode:sub(1, 1)
    if keep_mode ~= false and (mode == "i" or mode == "R") then
      -- Insert mode's cursor may sit after the last character, where Normal mode cannot be.
      local line = vim.api.nvim_get_current_line()
      local past_end = open.origin.cursor[2] >= #line and #line > 0
      if mode == "R" then
        vim.cmd.startreplace({ bang = past_end })
      else
        vim.cmd.startinsert({ bang = past_end })
      end
    end
  end
end

return M
