--- The approval picker: a float that shows exactly what the agent wants to do (the diff of an
--- edit, the new file of a create, the whole command with where and how long it runs) and takes
--- the answer in one key. Requests that arrive while one is open wait in a queue.
---
--- Only a deliberate answer answers: a question that arrives while the person types
--- (insert mode, a command line, or a key pressed elsewhere in the last `approval.typing` ms)
--- is shown without taking focus, and waits until they go to it (`keymaps.approve` from the
--- input or the chat, `:Agent approve`, or the float itself); once it has focus, keys do
--- nothing for `approval.delay` ms (its border says so); a grant that outlasts the call takes
--- its key twice; `<Esc>` hides the question without answering it.
---
--- Neovim never waits on the backend: the backend awaits the answer, matched by the request's id,
--- which `on_decide` sends back (`decide`, lua/agent/rpc/init.lua).

local M = {}
local H = {}

---@alias agent.Decision "allow_once"|"allow_session"|"allow_project"|"allow_all"|"edited"|"refuse"

--- An approval request as the backend sends it (src/front/nvim/protocol.rs, UiEvent::Approval). Every
--- string in it was made visible by the backend (crates/text/src/escape.rs); absent fields are nil.
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

--- The open picker: its windows, buffers, where focus came from (once it has it), whether it has
--- focus, whether its keys are armed, and the lasting choice waiting for its second key.
H.open = nil

--- True while the first queued question is hidden (`<Esc>`): it waits, unanswered, for
--- `M.focus()`.
H.hidden = false

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
  elseif not H.editing and not H.hidden then
    H.show_next()
  end
  H.redraw_status()
end

--- Closes the picker and forgets every waiting request without answering them (the backend
--- cancelled them: a cancelled turn or a new conversation).
function M.dismiss_all()
  H.queue = {}
  H.hidden = false
  H.close()
  if H.editing then
    H.editing = nil
    require("agent.proposal").close()
  end
  H.redraw_status()
end

--- Forgets the waiting requests of conversation `conversation` without answering them (the
--- backend cancelled them: its turn ended, or it started over); another conversation's stay,
--- and the next of them is shown when the one shown was its.
---@param conversation integer
function M.dismiss(conversation)
  local front = H.queue[1]
  local kept = vim.tbl_filter(function(item)
    return item.req.conversation ~= conversation
  end, H.queue)
  if #kept == #H.queue then
    return
  end
  H.queue = kept
  if front.req.conversation == conversation then
    H.close()
    if H.editing then
      H.editing = nil
      require("agent.proposal").close()
    end
    if #H.queue > 0 and not H.hidden then
      H.show_next()
    elseif #H.queue == 0 then
      H.hidden = false
    end
  elseif H.open then
    H.set_title()
  end
  H.redraw_status()
end

--- The questions waiting for an answer, in the order they will be shown: each `{ index,
--- conversation, title }` (`conversation` the number of the one that asked).
---@return { index: integer, conversation?: integer, title: string }[]
function M.list()
  local listed = {}
  for i, item in ipairs(H.queue) do
    listed[i] = { index = i, conversation = item.req.conversation, title = tostring(item.req.title) }
  end
  return listed
end

--- Shows question `index` of M.list() now, ahead of the others, and gives it focus (`:Agent
--- approvals`); its keys arm after `approval.delay` ms, as always.
---@param index integer
function M.bring(index)
  local item = H.queue[index]
  if not item or H.editing then
    return
  end
  if index > 1 then
    table.remove(H.queue, index)
    H.close()
    table.insert(H.queue, 1, item)
  end
  H.hidden = false
  if H.open then
    M.focus()
  else
    H.show_next(true)
    H.redraw_status()
  end
end

--- Goes to the waiting question (`:Agent approve`, `keymaps.approve`): shows it again when it
--- was hidden, and gives it focus; its keys arm after `approval.delay` ms, as always.
function M.focus()
  if H.editing then
    vim.notify("agent: the question is open for editing in its own tab (:w allows it, :q goes back)")
    return
  end
  if #H.queue == 0 then
    vim.notify("agent: no question is waiting")
    return
  end
  if H.hidden or not H.open then
    H.hidden = false
    H.show_next(true)
  elseif not H.open.focused then
    H.take_focus(H.open, { win = vim.api.nvim_get_current_win(), mode = vim.api.nvim_get_mode().mode })
  elseif vim.api.nvim_win_is_valid(H.open.choices_win) then
    vim.api.nvim_set_current_win(H.open.choices_win)
  end
  H.redraw_status()
end

--- What the status says of a waiting question: nil when none waits; else whether it is waiting
--- unseen (hidden, or shown without focus), for the hint of how to answer it.
--- `armed`: whether the picker, open with focus, takes keys yet.
---@return { unseen: boolean, key: string|false, armed: boolean }?
function M.waiting()
  if #H.queue == 0 or H.editing then
    return nil
  end
  local unseen = H.hidden or not (H.open and H.open.focused)
  return {
    unseen = unseen,
    key = require("agent.config").options.keymaps.approve,
    armed = H.open ~= nil and H.open.armed,
  }
end

--- Tells each conversation's status (its winbar, and statusline()) whether its question waits
--- unseen (the one shown or next is the first queued), and redraws it.
function H.redraw_status()
  local front = H.queue[1]
  local waiting = M.waiting()
  for _, conversation in ipairs(require("agent.conversations").all()) do
    local status = conversation.parts["agent.chat.status"]
    if status then
      local asking = front and front.req.conversation == conversation.id
      status.current.question = asking and waiting or nil
      require("agent.conversations").acting(conversation.id, status.render)
    end
  end
end

--- Whether the person is typing: in Insert, Replace, Terminal or Command-line mode, or a key
--- was typed outside the picker in the last `approval.typing` ms (lua/agent/keys.lua).
---@return boolean
function H.typing()
  return require("agent.keys").typing()
end

--- How many requests wait, the shown one included.
---@return integer
function M.pending()
  return #H.queue
end

-- The picker's title again when a conversation is opened or closed (whether the title names
-- the question's conversation depends on how many are open).
require("agent.conversations").on_changed(function()
  H.set_title()
end)

--- How many questions of conversation `conversation` wait for an answer.
---@param conversation integer
---@return integer
function M.pending_of(conversation)
  return #vim.tbl_filter(function(item)
    return item.req.conversation == conversation
  end, H.queue)
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
      lasting = option.kind == "allow_always",
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

--- The built-in choices that grant more than the call: they take their key twice.
H.LASTING = { allow_session = true, allow_project = true, allow_all = true }

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
      lasting = H.LASTING[choice.key] == true,
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
--- With `avoid` (a screen row: the cursor of a person typing), they go above or below it, so
--- the line being typed stays in sight.
function H.layout(preview_lines, choice_lines, avoid)
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
  -- The choices wrap on a narrow screen: their float is as tall as their rows, so the last
  -- choice is never cut off unseen.
  local choices_height = 0
  for _, line in ipairs(choice_lines) do
    choices_height = choices_height + math.max(1, math.ceil(vim.api.nvim_strwidth(line) / width))
  end
  -- The rows the floats may take: the whole screen, or the larger side of the avoided row.
  local top, bottom = 0, rows
  if avoid then
    if avoid > rows / 2 then
      bottom = math.max(1, avoid - 1)
    else
      top = math.min(rows - 1, avoid + 1)
    end
  end
  local space = bottom - top
  -- Borders: 2 rows around each float.
  local room = math.max(1, space - choices_height - 4)
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
  local row = math.max(top, top + math.floor((space - total) / 2))
  local col = math.max(0, math.floor((columns - width - 2) / 2))
  return {
    preview = { row = row, col = col, width = width, height = preview_height },
    choices = { row = row + preview_height + 2, col = col, width = width, height = choices_height },
  }
end

--- The screen row of the cursor in the current window (1-based), for a float that must not
--- cover it.
function H.cursor_row()
  local pos = vim.fn.screenpos(0, vim.fn.line("."), vim.fn.col("."))
  return pos.row > 0 and pos.row or nil
end

--- The keys that pick `choice`: from `keymaps.approval` for our own choices; for an external
--- agent's options, their digit, plus y for the first allow and n/<Esc> for the first reject.
function H.keys_for(choice, req)
  if H.from_agent(req) and not choice.edit then
    local out = { choice.digit }
    if choice.key == "allow_once" then
      table.insert(out, "y")
    elseif choice.key == "refuse" then
      table.insert(out, "n")
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

--- Shows the first queued request. It takes focus when `focus` is true (the person asked for
--- it), or when nil and the person is not typing; otherwise it is shown beside what they type,
--- and waits for them.
---@param focus? boolean
---@param from? { win: integer, cursor?: integer[], mode: string } where focus goes back when it is
--- answered (default: here, now)
function H.show_next(focus, from)
  local item = H.queue[1]
  if not item then
    return
  end
  if focus == nil then
    focus = not H.typing()
  end
  local req = item.req
  local choices = H.choices(req)
  local preview = H.preview_lines(req.preview)
  local choice_lines = H.choice_lines(choices, req)
  local avoid = not focus and H.cursor_row() or nil
  local place = H.layout(preview, choice_lines, avoid)

  local origin = from or {
    win = vim.api.nvim_get_current_win(),
    mode = vim.api.nvim_get_mode().mode,
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
  -- Wrapped, scrolled by screen rows: a line longer than the float is shown whole, and the
  -- middle of a 12,000-character line is reached by scrolling, never jumped over.
  vim.wo[preview_win].wrap = true
  vim.wo[preview_win].linebreak = false
  vim.wo[preview_win].smoothscroll = true
  vim.wo[preview_win].winhighlight = "FloatTitle:AgentApprovalTitle"
  local choices_win = vim.api.nvim_open_win(choices_buf, false, {
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

  local open = {
    item = item,
    choices = choices,
    preview_win = preview_win,
    preview_buf = preview_buf,
    choices_win = choices_win,
    choices_buf = choices_buf,
    is_diff = req.preview.kind == "diff",
    preview_lines = preview,
    choice_lines = choice_lines,
    focused = false,
    armed = false,
    avoid = avoid,
    -- A diff's hunks (their first and last rows in the preview), the one the hunk keys work on,
    -- and those the person dropped (by place, from 1).
    -- (An external agent's diff only when what it writes comes through us, so that the hunks
    -- kept are what gets written: the same condition as its "Edit before allowing".)
    hunks = req.preview.kind == "diff" and (not H.from_agent(req) or req.choices.edit ~= nil) and H.hunk_rows(preview)
      or {},
    hunk = 1,
    dropped = {},
  }
  H.open = open
  H.draw_hunks()
  H.set_title()
  H.set_footer()
  H.map_keys(choices_buf)
  H.watch()
  if focus then
    H.take_focus(open, origin)
  else
    H.set_choices_title()
  end
  H.redraw_status()
end

--- Gives the open picker focus (from `origin`, where focus goes back when it is answered) and
--- starts the delay before its keys count.
function H.take_focus(open, origin)
  if not vim.api.nvim_win_is_valid(open.choices_win) then
    return
  end
  if vim.api.nvim_win_is_valid(origin.win) then
    origin.cursor = origin.cursor or vim.api.nvim_win_get_cursor(origin.win)
  end
  open.origin = origin
  open.focused = true
  if vim.api.nvim_get_current_win() ~= open.choices_win then
    open.entering = true
    vim.api.nvim_set_current_win(open.choices_win)
    open.entering = false
  end
  local mode = (origin.mode or "n"):sub(1, 1)
  if mode == "i" or mode == "R" then
    vim.cmd.stopinsert()
  end
  if open.avoid then
    -- It stood aside for the line being typed; centred now that it is being answered.
    open.avoid = nil
    H.relayout()
  end
  H.arm(open)
  H.redraw_status()
end

--- Arms the picker's keys after `approval.delay` ms; until then they do nothing and the choices'
--- border says so. A key meant for something else, pressed as the question appeared, answers
--- nothing.
function H.arm(open)
  open.armed = false
  local delay = require("agent.config").options.approval.delay
  if delay <= 0 then
    open.armed = true
    H.set_choices_title()
    return
  end
  H.set_choices_title()
  vim.defer_fn(function()
    if H.open == open then
      open.armed = true
      H.set_choices_title()
    end
  end, delay)
end

--- The choices' top border: not armed yet, a lasting choice waiting for its second key, or how
--- to answer a question shown without focus.
function H.set_choices_title()
  local open = H.open
  if not open or not vim.api.nvim_win_is_valid(open.choices_win) then
    return
  end
  local title
  if not open.focused then
    local key = require("agent.config").options.keymaps.approve
    -- The key is the input's and the chat's; the command works from anywhere.
    title = key and (" :Agent approve to answer (%s in the chat) "):format(key) or " :Agent approve to answer "
  elseif not open.armed then
    title = " not armed yet · keys wait a moment "
  elseif open.confirming then
    local keys = H.keys_for(open.confirming, open.item.req)
    title = (" press %s again to confirm "):format(keys[1] or require("agent.config").options.keymaps.approval.select)
  end
  if title == open.choices_title then
    return
  end
  open.choices_title = title
  local config = vim.api.nvim_win_get_config(open.choices_win)
  config.title = title or ""
  config.title_pos = title and "center" or nil
  vim.api.nvim_win_set_config(open.choices_win, config)
end

--- The preview's title: the request's title (the backend made it visible and says there how many
--- lines a command has), after its conversation's name when several are live, `1/3` when more
--- wait, and a command's length in characters when it is
--- taller than its window (so a line that goes on and on says so).
function H.set_title()
  local open = H.open
  if not open or not vim.api.nvim_win_is_valid(open.preview_win) then
    return
  end
  local req = open.item.req
  local title = tostring(req.title)
  -- The backend says a long line's characters (`1 line, 12046 chars`); several lines taller
  -- than the window say theirs too.
  if
    req.preview.kind == "command"
    and title:match(" lines$")
    and H.rows(open.preview_win).total > vim.api.nvim_win_get_height(open.preview_win)
  then
    title = ("%s, %d chars"):format(title, vim.fn.strchars(tostring(req.preview.command or "")))
  end
  -- With several conversations live, whose question it is: `[fix tests] run_bash · 2 lines`.
  local conversations = require("agent.conversations")
  local asking = conversations.get(req.conversation)
  if asking and #conversations.all() > 1 then
    title = ("[%s] %s"):format(conversations.label(asking), title)
  end
  local dropped = H.dropped_list(open)
  if #dropped > 0 then
    title = ("%s · %d of %d hunks"):format(title, #open.hunks - #dropped, #open.hunks)
  end
  title = " " .. title .. " "
  if #H.queue > 1 then
    title = title .. ("1/%d "):format(#H.queue)
  end
  local config = vim.api.nvim_win_get_config(open.preview_win)
  config.title = title
  config.title_pos = "center"
  vim.api.nvim_win_set_config(open.preview_win, config)
end

--- The preview window's screen rows: all its text takes, those above the top of the window
--- (whole lines scrolled past, and the part of the top line scrolled past with 'smoothscroll'),
--- and those below its bottom. A 12,000-character line is one buffer line and dozens of rows.
---@return { total: integer, above: integer, below: integer }
function H.rows(win)
  local total = vim.api.nvim_win_text_height(win, {}).all
  local view = vim.api.nvim_win_call(win, vim.fn.winsaveview)
  local above = 0
  if view.topline > 1 then
    above = vim.api.nvim_win_text_height(win, { start_row = 0, end_row = view.topline - 2 }).all
  end
  if (view.skipcol or 0) > 0 then
    local row = view.topline - 1
    above = above + vim.api.nvim_win_text_height(win, { start_row = row, end_row = row, end_vcol = view.skipcol }).all
  end
  local height = vim.api.nvim_win_get_height(win)
  return { total = total, above = above, below = math.max(0, total - above - height) }
end

--- The preview's bottom border: how many screen rows are out of sight below (or above) and the
--- key that scrolls to them, whenever the preview is taller than its window, then where a
--- command runs. The count goes first so a narrow float never cuts it.
function H.set_footer()
  local open = H.open
  if not open or not vim.api.nvim_win_is_valid(open.preview_win) then
    return
  end
  local win = open.preview_win
  local keys = require("agent.config").options.keymaps.approval
  local rows = H.rows(win)
  local parts = {}
  if rows.below > 0 then
    parts[#parts + 1] = ("↓ %d more %s · %s"):format(
      rows.below,
      rows.below == 1 and "row" or "rows",
      keys.scroll_down
    )
  elseif rows.above > 0 then
    parts[#parts + 1] = ("↑ %d above · %s"):format(rows.above, keys.scroll_up)
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
  -- Until the picker is armed a key does nothing (scrolling aside: it decides nothing).
  local function armed(fn)
    return function()
      if H.open and H.open.armed then
        fn()
      end
    end
  end
  for _, choice in ipairs(H.open.choices) do
    for _, lhs in ipairs(H.keys_for(choice, H.open.item.req)) do
      map(
        lhs,
        armed(function()
          H.pick(choice)
        end),
        choice.label
      )
    end
  end
  map(
    keys.select,
    armed(function()
      local row = vim.api.nvim_win_get_cursor(0)[1]
      H.pick(H.open.choices[row])
    end),
    "pick the highlighted choice"
  )
  map(keys.hide, armed(H.hide), "hide the question without answering it (:Agent approve shows it again)")
  if #H.open.hunks > 0 then
    map(keys.next_hunk, function()
      H.move_hunk(1)
    end, "the next hunk of the diff")
    map(keys.prev_hunk, function()
      H.move_hunk(-1)
    end, "the previous hunk of the diff")
    map(
      keys.drop_hunk,
      armed(H.toggle_hunk),
      "drop the hunk (or keep it again): allowing once writes only the hunks kept"
    )
  end
  map(keys.scroll_down, function()
    H.scroll(1)
  end, "scroll the preview down")
  map(keys.scroll_up, function()
    H.scroll(-1)
  end, "scroll the preview up")
  map("?", function()
    require("agent.keyhelp").show(buf, "approval picker")
  end, "the keys of this picker")
end

--- Scrolls the preview half a window of screen rows (`direction` 1 down, -1 up): with
--- 'smoothscroll', CTRL-E and CTRL-Y move by screen rows, so a long line is read row by row.
function H.scroll(direction)
  local open = H.open
  if open and vim.api.nvim_win_is_valid(open.preview_win) then
    local win = open.preview_win
    local half = math.max(1, math.floor(vim.api.nvim_win_get_height(win) / 2))
    local rows = H.rows(win)
    local n = direction > 0 and math.min(half, rows.below) or math.min(half, rows.above)
    if n > 0 then
      vim.api.nvim_win_call(win, function()
        vim.cmd(("normal! %d%s"):format(n, direction > 0 and "\5" or "\25"))
      end)
    end
    H.set_footer()
  end
end

--- Re-centres on resize; entering the float is going to it; closing a window of the picker any
--- other way than by a choice hides the question (never answers it).
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
  -- The person went into the float (a click, CTRL-W): that is going to the question.
  vim.api.nvim_create_autocmd("WinEnter", {
    group = group,
    callback = function()
      local win = vim.api.nvim_get_current_win()
      if H.open ~= open or open.focused or open.entering then
        return
      end
      if win == open.choices_win or win == open.preview_win then
        local previous = vim.fn.win_getid(vim.fn.winnr("#"))
        -- The mode it was entered in (a click from Insert mode stays in Insert): taking focus
        -- leaves it, and answering gives it back. Coming back from a float of its own (the
        -- keys list) or a look elsewhere, it still gives focus back where it first took it.
        local origin = open.origin
        if not (origin and vim.api.nvim_win_is_valid(origin.win)) then
          origin = { win = previous, mode = vim.api.nvim_get_mode().mode }
        end
        H.take_focus(open, origin)
        if win == open.preview_win and vim.api.nvim_win_is_valid(open.choices_win) then
          vim.api.nvim_set_current_win(open.choices_win)
        end
      end
    end,
  })
  -- Left for another window (CTRL-W p): no longer in hand. Coming back is going to it again,
  -- with the delay again, and the status says it waits meanwhile.
  vim.api.nvim_create_autocmd("WinLeave", {
    group = group,
    callback = function()
      if H.open == open and open.focused and vim.api.nvim_get_current_win() == open.choices_win then
        open.focused = false
        open.armed = false
        open.confirming = nil
        H.set_choices_title()
        H.redraw_status()
      end
    end,
  })
  -- The person went to another tab page (another conversation's): a float stays in the tab page
  -- it was opened in, so the question follows them, shown beside what they do there (never
  -- taking their keys), its name in its title.
  vim.api.nvim_create_autocmd("TabEnter", {
    group = group,
    callback = function()
      vim.schedule(function()
        if H.open ~= open or H.editing or not vim.api.nvim_win_is_valid(open.choices_win) then
          return
        end
        if vim.api.nvim_win_get_tabpage(open.choices_win) == vim.api.nvim_get_current_tabpage() then
          return
        end
        open.origin = nil -- focus is never given back in the tab page left
        H.close()
        H.show_next(false)
      end)
    end,
  })
  vim.api.nvim_create_autocmd("WinClosed", {
    group = group,
    pattern = { tostring(open.preview_win), tostring(open.choices_win) },
    callback = function()
      vim.schedule(function()
        if H.open == open then
          H.hide()
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
  local place = H.layout(open.preview_lines, open.choice_lines, open.avoid)
  for _, part in ipairs({ { open.preview_win, place.preview }, { open.choices_win, place.choices } }) do
    local win, where = part[1], part[2]
    if vim.api.nvim_win_is_valid(win) then
      local config = vim.api.nvim_win_get_config(win)
      config.row, config.col, config.width, config.height = where.row, where.col, where.width, where.height
      vim.api.nvim_win_set_config(win, config)
    end
  end
  H.set_title()
  H.set_footer()
end

--- Hides the question without answering it: the floats close, focus goes back, and it waits
--- (the status says so) until `M.focus()` shows it again.
function H.hide()
  if not H.open then
    return
  end
  H.hidden = true
  H.close()
  H.redraw_status()
end

--- Picks `choice`. A lasting one (this session, always in this project, everything) takes its
--- key twice: the first press asks for the second, and any other choice is a choice of its own.
function H.pick(choice)
  local open = H.open
  if not choice or not open then
    return
  end
  if choice.lasting and open.confirming ~= choice then
    open.confirming = choice
    for row, shown in ipairs(open.choices) do
      if shown == choice then
        pcall(vim.api.nvim_win_set_cursor, open.choices_win, { row, 0 })
      end
    end
    H.set_choices_title()
    return
  end
  open.confirming = nil
  if #H.dropped_list(open) > 0 and choice.decision ~= "allow_once" and choice.decision ~= "refuse" then
    vim.notify(
      "agent: with hunks dropped, only allowing once writes the ones kept; keep them all again to choose this",
      vim.log.levels.WARN
    )
    return
  end
  if choice.edit then
    return H.edit(choice)
  end
  if not choice.reason then
    return H.finish(choice.decision, nil, choice.option)
  end
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
  local origin = open.origin or { win = vim.api.nvim_get_current_win() }
  local handlers = {
    on_write = function(text)
      if H.editing ~= item then
        return
      end
      H.editing = nil
      table.remove(H.queue, 1)
      -- Back where the person was, in the mode they were in (typing into the input).
      H.return_to(origin, true)
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
      H.return_to(origin, false)
      -- Back to the question the person left for its proposal: it takes focus again, and
      -- gives it back where the person was before the proposal, in the mode they were in.
      H.show_next(true, vim.api.nvim_win_is_valid(origin.win) and origin or nil)
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
  local dropped = H.dropped_list(open)
  local hunks = decision == "allow_once"
      and #dropped > 0
      and { dropped = vim.tbl_map(function(i)
        return i - 1
      end, dropped), count = #open.hunks }
    or nil
  open.item.on_decide(decision, reason, option, nil, hunks)
  if #H.queue > 0 then
    -- After the mode given back to the origin took effect (a startinsert waits for the end
    -- of this key's handling): the next question then sees the person where they were.
    vim.schedule(function()
      if not H.open and not H.editing and not H.hidden and #H.queue > 0 then
        H.show_next()
      end
    end)
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
  -- Shown without focus, it never had any to give back: the person's window and mode are theirs.
  if open.origin then
    H.return_to(open.origin, keep_mode ~= false)
  end
end

--- Puts the cursor back where `origin` says (window, position) and, with `mode`, in the mode it
--- was in there (Insert and Replace are started again).
---@param origin { win: integer, cursor?: integer[], mode?: string }
---@param mode boolean
function H.return_to(origin, mode)
  if not vim.api.nvim_win_is_valid(origin.win) then
    return
  end
  pcall(vim.api.nvim_set_current_win, origin.win)
  if origin.cursor then
    pcall(vim.api.nvim_win_set_cursor, origin.win, origin.cursor)
  end
  local was = (origin.mode or "n"):sub(1, 1)
  if mode and (was == "i" or was == "R") then
    -- Insert mode's cursor may sit after the last character, where Normal mode cannot be.
    local line = vim.api.nvim_get_current_line()
    local column = origin.cursor and origin.cursor[2] or #line
    local past_end = column >= #line and #line > 0
    if was == "R" then
      vim.cmd.startreplace({ bang = past_end })
    else
      vim.cmd.startinsert({ bang = past_end })
    end
  end
end

-- Hunks ---------------------------------------------------------------------------------------

-- The rows (from 1) each `@@` section of a diff's preview lines spans.
function H.hunk_rows(lines)
  local hunks = {}
  for row, line in ipairs(lines) do
    if line:sub(1, 3) == "@@ " then
      if hunks[#hunks] then
        hunks[#hunks].last = row - 1
      end
      hunks[#hunks + 1] = { first = row, last = #lines }
    end
  end
  return hunks
end

-- The places (from 1) of the hunks dropped, in order.
function H.dropped_list(open)
  local list = {}
  for i = 1, #(open and open.hunks or {}) do
    if open.dropped[i] then
      list[#list + 1] = i
    end
  end
  return list
end

H.ns_hunks = vim.api.nvim_create_namespace("agent.approval.hunks")

-- Marks the hunk the keys work on (`▶` before its `@@` line) and dims the dropped ones, each
-- `@@` line saying so.
function H.draw_hunks()
  local open = H.open
  if not (open and #open.hunks > 0 and vim.api.nvim_buf_is_valid(open.preview_buf)) then
    return
  end
  vim.api.nvim_buf_clear_namespace(open.preview_buf, H.ns_hunks, 0, -1)
  for i, hunk in ipairs(open.hunks) do
    local marks = {}
    if #open.hunks > 1 or open.dropped[i] then
      marks[#marks + 1] = { i == open.hunk and " ◀ hunk keys" or "", "AgentApprovalKey" }
    end
    if open.dropped[i] then
      marks[#marks + 1] = { " dropped", "AgentDiffDropped" }
      for row = hunk.first + 1, hunk.last do
        vim.api.nvim_buf_set_extmark(open.preview_buf, H.ns_hunks, row - 1, 0, {
          line_hl_group = "AgentDiffDropped",
          priority = 300,
        })
      end
    end
    if #marks > 0 then
      vim.api.nvim_buf_set_extmark(open.preview_buf, H.ns_hunks, hunk.first - 1, 0, {
        virt_text = marks,
        virt_text_pos = "eol",
      })
    end
  end
end

-- Moves the hunk keys to the next (1) or previous (-1) hunk, and shows it.
function H.move_hunk(step)
  local open = H.open
  if not open or #open.hunks == 0 then
    return
  end
  open.hunk = (open.hunk - 1 + step) % #open.hunks + 1
  H.draw_hunks()
  if vim.api.nvim_win_is_valid(open.preview_win) then
    pcall(vim.api.nvim_win_set_cursor, open.preview_win, { open.hunks[open.hunk].first, 0 })
    vim.api.nvim_win_call(open.preview_win, function()
      vim.cmd("normal! zt")
    end)
  end
end

-- Drops the hunk the keys are on, or keeps it again.
function H.toggle_hunk()
  local open = H.open
  if not open or #open.hunks == 0 then
    return
  end
  open.dropped[open.hunk] = not open.dropped[open.hunk] or nil
  H.draw_hunks()
  H.set_title()
end

return M
