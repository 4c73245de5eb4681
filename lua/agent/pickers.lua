--- The lists :Agent offers in vim.ui.select when a subcommand is given without its argument:
--- models, queued prompts, saved conversations, rewind points and what a rewind restores. Each
--- takes the public API (`require("agent")`, passed in: this module never requires it) and calls
--- back into it with the choice.

local M = {}
local H = {}

--- `:Agent model`: the models to choose from, the one in use marked.
---@param api table the public API
function M.model(api)
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
  local names = api.models()
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
      api.model(name)
    end
  end)
end

--- One conversation as :Agent list shows it: `fix tests · built-in · running cargo test 4s ·
--- 4 min ago · $0.42` (`since 14:05` before the backend runs), marked `(here)` when it is the
--- current tab page's.
---@param row agent.ConversationRow
---@return string
function M.conversation_row(row)
  local parts =
    { row.name, row.agent, row.waiting and "waiting for approval" or row.state, row.age or ("since " .. row.since) }
  if row.cost then
    parts[#parts + 1] = require("agent.chat.status").dollars(row.cost)
  end
  local line = table.concat(parts, " · ")
  return row.current and (line .. "  (here)") or line
end

--- `:Agent list`: every live conversation with its state and cost, and what they cost in all;
--- choosing one goes to it (api.show).
---@param api table the public API
function M.conversations(api)
  local rows = api.conversations()
  if #rows == 0 then
    vim.notify("agent: no conversation is open; :Agent starts one", vim.log.levels.INFO)
    return
  end
  local total, priced = 0, true
  for _, row in ipairs(rows) do
    total = total + (row.cost or 0)
    priced = priced and row.cost ~= nil
  end
  local dollars = require("agent.chat.status").dollars(total)
  local sum = priced and (dollars .. " in all") or (dollars .. " in all, without the unpriced")
  vim.ui.select(rows, {
    prompt = ("agent: %d conversation%s · %s"):format(#rows, #rows == 1 and "" or "s", sum),
    kind = "agent.conversations",
    format_item = M.conversation_row,
  }, function(row)
    if row then
      api.show(row.id)
    end
  end)
end

--- A rewind of the code would undo what other open conversations changed since that prompt:
--- says which files and whose, and asks whether to keep their changes, put them back too, or
--- change nothing; the rewind is sent again with the answer (api.rewind).
---@param api table the public API
---@param event { turn: integer, mode: string, files: string[], by: integer[] }
function M.rewind_others(api, event)
  local conversations = require("agent.conversations")
  local asking = conversations.active()
  local names = {}
  for _, id in ipairs(event.by or {}) do
    local other = conversations.get(id)
    names[#names + 1] = other and ("[%s]"):format(conversations.label(other)) or "a closed conversation"
  end
  local files = event.files or {}
  local shown = table.concat(vim.list_slice(files, 1, 5), ", ")
  if #files > 5 then
    shown = ("%s and %d more"):format(shown, #files - 5)
  end
  local rows = {
    { answer = "keep", text = "Keep their changes: put back only the rest" },
    { answer = "restore", text = "Put them back too (their changes are undone)" },
    { text = "Cancel: change nothing" },
  }
  vim.ui.select(rows, {
    prompt = ("agent: %s changed %s since prompt %d"):format(table.concat(names, ", "), shown, event.turn),
    kind = "agent.rewind_others",
    format_item = function(row)
      return row.text
    end,
  }, function(row)
    if row and row.answer and conversations.get(asking.id) then
      conversations.acting(asking.id, api.rewind, event.turn, event.mode, row.answer)
    end
  end)
end

--- `:Agent approvals`: the questions waiting for an answer, each after its conversation's name;
--- choosing one shows it now, with focus.
function M.approvals()
  local approval = require("agent.approval")
  local rows = approval.list()
  if #rows == 0 then
    vim.notify("agent: no question is waiting", vim.log.levels.INFO)
    return
  end
  local conversations = require("agent.conversations")
  vim.ui.select(rows, {
    prompt = "agent: questions waiting for an answer",
    kind = "agent.approvals",
    format_item = function(row)
      local asking = conversations.get(row.conversation)
      return ("[%s] %s"):format(asking and conversations.label(asking) or "closed", row.title)
    end,
  }, function(row)
    if row then
      -- The queue may have moved on while the list was open: found again by its place and title.
      for _, now in ipairs(approval.list()) do
        if now.title == row.title and now.conversation == row.conversation then
          approval.bring(now.index)
          return
        end
      end
    end
  end)
end

--- `:Agent queue`: the queued prompts; choosing one removes it (back into the input).
---@param api table the public API
function M.queued(api)
  local items = api.queue()
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

--- One conversation as the resume list shows it: title, age, prompts, tokens, after
--- `{agent}: ` when it is an external agent's session; one the agent listed itself as
--- `{agent}: {title} · {age}`, with what the agent gave of those. The age is the backend's
--- wording (one formatter for both front ends).
---@param session agent.Session
---@return string
function M.session_item(session)
  local mark = session.agent and (session.agent .. ": ") or ""
  local age = session.age or ""
  if session.agent and not session.prompts then
    local shown = session.problem or (session.title ~= "" and session.title or session.session or session.id)
    return mark .. shown .. ((not session.problem and age ~= "") and (" · " .. age) or "")
  end
  if session.problem then
    return ("%s (%s)"):format(session.id, session.problem)
  end
  local title = session.title ~= "" and session.title or session.id
  return mark
    .. ("%s · %s · %d prompt%s · %d tokens"):format(
      title,
      age,
      session.prompts,
      session.prompts == 1 and "" or "s",
      session.tokens
    )
end

--- `:Agent resume` without an id: the workspace's conversations.
---@param api table the public API
function M.session(api)
  local list = api.sessions()
  if not list then
    return
  end
  if #list == 0 then
    vim.notify("agent: no saved conversation in this workspace", vim.log.levels.INFO)
    return
  end
  -- Besides resuming one: renaming one of ours, deleting one of ours or one of the agent's own
  -- sessions (the agent deletes those, `session/delete`, where it offers to).
  local ours = vim.tbl_filter(H.ours, list)
  local deletable = vim.tbl_filter(function(session)
    return H.ours(session) or (session.session ~= nil and not session.problem)
  end, list)
  local items = vim.list_extend({}, list)
  if #ours > 0 then
    items[#items + 1] = { action = "rename", label = "✎ rename one of them…" }
  end
  if #deletable > 0 then
    items[#items + 1] = { action = "delete", label = "✗ delete one of them…" }
  end
  vim.ui.select(items, { prompt = "Resume a conversation", format_item = H.format_row }, function(choice)
    if not choice then
      return
    end
    if choice.action then
      H.shape_session(api, choice.action, choice.action == "delete" and deletable or ours)
      return
    end
    if choice.problem then
      vim.notify(("agent: %s cannot be resumed: %s"):format(choice.id, choice.problem), vim.log.levels.ERROR)
      return
    end
    api.resume(choice.id)
  end)
end

--- A saved conversation of ours that can be renamed or deleted (not an agent's own session).
function H.ours(session)
  return session.prompts ~= nil and not session.problem
end

--- A row of the resume list: a conversation, or one of the actions after them.
function H.format_row(item)
  return item.action and item.label or M.session_item(item)
end

--- Renames or deletes (`action`) one of `ours`, asking which, then the new name or whether to
--- delete it.
function H.shape_session(_, action, ours)
  local rpc = require("agent.rpc")
  if not rpc.ensure() then
    return
  end
  local prompt = action == "rename" and "Rename which conversation?" or "Delete which conversation?"
  vim.ui.select(ours, { prompt = prompt, format_item = M.session_item }, function(session)
    if not session then
      return
    end
    if action == "rename" then
      vim.ui.input({ prompt = "agent: new name: ", default = session.title }, function(title)
        if not title or vim.trim(title) == "" then
          return
        end
        local named, err = rpc.session_rename(session.id, vim.trim(title))
        vim.notify(
          named and ("agent: renamed to %s"):format(named) or (err or "agent: not renamed"),
          named and vim.log.levels.INFO or vim.log.levels.ERROR
        )
      end)
      return
    end
    local shown = session.title ~= "" and session.title or session.id
    local what = session.prompts ~= nil and "Its saved file and its checkpoints' references go; your files stay."
      or ("%s deletes it; your files stay."):format(session.agent or "the agent")
    vim.ui.select({ "Keep it", "Delete it" }, {
      prompt = ("Delete %s? %s"):format(shown, what),
    }, function(answer)
      if answer ~= "Delete it" then
        return
      end
      local done, err = rpc.session_delete(session.id)
      vim.notify(done or err or "agent: not deleted", done and vim.log.levels.INFO or vim.log.levels.ERROR)
    end)
  end)
end

--- `:Agent stop` with prompts queued behind the turn: drop them or send them. No answer
--- (<Esc>) keeps them: nothing is lost without saying so.
---@param queued integer how many are queued
---@param answered fun(answer: "drop"|"keep")
function M.stop_queue(queued, answered)
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
    answered(choice and choice.answer or "keep")
  end)
end

--- `:Agent permissions`: the rules in force with where each came from; choosing a saved one
--- removes it with `remove` (the backend's `permissions` request), one from setup() says where
--- to change it.
---@param rows table[] the backend's rows: `{ rule, origin, removable, raw }`
---@param remove fun(raw: string): any, string?
function M.permissions(rows, remove)
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
    local removed, remove_err = remove(row.raw)
    if not removed then
      vim.notify(("agent: cannot remove %s: %s"):format(row.rule, remove_err), vim.log.levels.ERROR)
      return
    end
    vim.notify(("agent: removed the saved rule %s for this project"):format(row.rule), vim.log.levels.INFO)
  end)
end

--- What a rewind can restore, in the order :Agent rewind offers them.
M.rewind_modes = {
  { label = "Code and conversation", mode = "both" },
  { label = "Code only", mode = "code" },
  { label = "Conversation only", mode = "conversation" },
}

--- `:Agent rewind` without a prompt: the rewind points, newest first.
---@param api table the public API
function M.rewind(api)
  local points = api.rewind_points()
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
      api.rewind("undo")
    elseif choice then
      M.rewind_mode(api, choice.turn)
    end
  end)
end

--- Asks what a rewind to before prompt `n` restores, then does it.
---@param api table the public API
---@param n integer
function M.rewind_mode(api, n)
  vim.ui.select(M.rewind_modes, {
    prompt = ("Rewind to before prompt %d: restore"):format(n),
    format_item = function(choice)
      return choice.label
    end,
  }, function(choice)
    if choice then
      api.rewind(n, choice.mode)
    end
  end)
end

return M
