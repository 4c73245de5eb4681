--- The approval question: "may the agent do this?", answered once.
---
--- For now a vim.ui.select list (so it goes through the user's picker, if they have one); a
--- floating picker with a diff preview replaces this module later, keeping `ask`'s contract.

local M = {}
local H = {}

--- The choices, in order, with the decision each sends.
H.choices = {
  { label = "Allow once", decision = "allow_once" },
  { label = "Allow for this session", decision = "allow_session" },
  { label = "Allow everything this session", decision = "allow_all" },
  { label = "Refuse", decision = "refuse" },
  { label = "Refuse with a reason…", decision = "refuse", reason = true },
}

---@alias agent.Decision "allow_once"|"allow_session"|"allow_all"|"refuse"

--- Asks the user about approval request `req` (src/nvim/protocol.rs, UiEvent::Approval) and
--- calls `on_decide` exactly once with the answer. Dismissing the question refuses.
---@param req { id: integer, tool: string, detail: string, diff?: string, action: { kind: string, rel?: string, command?: string }, cwd: string, timeout: number }
---@param on_decide fun(decision: agent.Decision, reason?: string)
function M.ask(req, on_decide)
  local answered = false
  local function decide(decision, reason)
    if not answered then
      answered = true
      on_decide(decision, reason)
    end
  end
  local labels = vim.tbl_map(function(choice)
    return choice.label
  end, H.choices)
  local action = type(req.action) == "table" and req.action or {}
  local scope = action.kind == "edit" and "edits to any file in this workspace" or "this exact command line"
  vim.ui.select(labels, {
    prompt = H.prompt(req),
    kind = "agent.approval",
    format_item = function(label)
      if label == "Allow for this session" then
        return ("%s (%s)"):format(label, scope)
      end
      return label
    end,
  }, function(_, index)
    local choice = index and H.choices[index]
    if not choice then
      return decide("refuse")
    end
    if not choice.reason then
      return decide(choice.decision)
    end
    vim.ui.input({ prompt = "agent: why refuse? (the agent reads this) " }, function(reason)
      reason = reason and vim.trim(reason) or ""
      decide("refuse", reason ~= "" and reason or nil)
    end)
  end)
end

function H.prompt(req)
  if req.tool == "run_bash" then
    return ("agent: run this command? (in %s, timeout %ss)\n%s"):format(
      tostring(req.cwd),
      tostring(req.timeout),
      tostring(req.detail)
    )
  end
  return ("agent: %s: %s?"):format(tostring(req.tool), tostring(req.detail))
end

return M
