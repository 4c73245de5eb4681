--- How a prompt's attachments are written into the text the model reads, and read back from a
--- saved prompt (a resumed chat shows the same folded rows). Pure: requires nothing, so the
--- chat may use it.
---
--- Each attachment follows the typed text as
---   [attached: @ src/calc.py (116 chars)]
---   ````
---   its text
---   ````
--- the fence one backtick longer than the longest run of backticks in the text (at least
--- three), so the text cannot end it early. A refused one is `[attached: @ x: Refused: ...]`.

local M = {}
local H = {}

---@class agent.Attachment
---@field row string what the chat's row says: `@ src/calc.py (116 chars)`
---@field text? string what the model reads (absent for a problem)
---@field shown? string the text made visible, folded under the row
---@field problem? string why nothing was attached (refused, not a text file)
---@field image? boolean an image (`image: shot.png · 1280×720 · 240 KB`), sent beside the text
---@field audio? boolean an audio clip (`audio: note.wav · 240 KB`), sent beside the text
---@field file? string where the backend saved that image (drawn as a picture where possible)

--- The row of an answer of the backend's `attach` (protocol.rs `request::ATTACH`).
---@param answer table
---@return string
function M.row(answer)
  if answer.problem then
    return ("%s: %s"):format(answer.label, answer.problem)
  end
  local notes = { ("%d chars"):format(answer.chars or 0) }
  if answer.truncated then
    notes[#notes + 1] = "truncated"
  end
  if answer.unsaved then
    notes[#notes + 1] = "unsaved buffer"
  end
  return ("%s (%s)"):format(answer.label, table.concat(notes, ", "))
end

--- The prompt the model reads: `typed`, then each attachment.
---@param typed string
---@param attachments agent.Attachment[]
---@return string
function M.prompt(typed, attachments)
  if #attachments == 0 then
    return typed
  end
  local parts = { typed }
  for _, a in ipairs(attachments) do
    if a.problem or a.image or a.audio then
      parts[#parts + 1] = ("[attached: %s]"):format(a.row)
    else
      local fence = H.fence(a.text)
      local body = a.text:sub(-1) == "\n" and a.text or (a.text .. "\n")
      parts[#parts + 1] = ("[attached: %s]\n%s\n%s%s"):format(a.row, fence, body, fence)
    end
  end
  return table.concat(parts, "\n\n")
end

--- Splits a prompt as M.prompt wrote it into the typed text and its attachments (their `row`
--- and `shown`); a prompt without any comes back whole with none.
---@param text string
---@return string typed
---@return agent.Attachment[] attachments
function M.parse(text)
  local lines = vim.split(text, "\n", { plain = true })
  local first
  for i = 2, #lines do
    if lines[i - 1] == "" and lines[i]:match("^%[attached: .*%]$") then
      first = i
      break
    end
  end
  if not first then
    return text, {}
  end
  local attachments = {}
  local i = first
  while i <= #lines do
    local row = lines[i]:match("^%[attached: (.*)%]$")
    if not row then
      return text, {} -- not ours after all
    end
    local fence = lines[i + 1] and lines[i + 1]:match("^(```+)$")
    if fence then
      local body = {}
      local j = i + 2
      while j <= #lines and lines[j] ~= fence do
        body[#body + 1] = lines[j]
        j = j + 1
      end
      attachments[#attachments + 1] = { row = row, shown = table.concat(body, "\n") }
      i = j + 1
    elseif row:match("^image: ") then
      attachments[#attachments + 1] = { row = row, image = true }
      i = i + 1
    elseif row:match("^audio: ") then
      attachments[#attachments + 1] = { row = row, audio = true }
      i = i + 1
    else
      attachments[#attachments + 1] = { row = row, problem = row }
      i = i + 1
    end
    while lines[i] == "" do
      i = i + 1
    end
  end
  return table.concat(lines, "\n", 1, first - 2), attachments
end

function H.fence(text)
  local longest = 2
  for ticks in text:gmatch("`+") do
    longest = math.max(longest, #ticks)
  end
  return string.rep("`", longest + 1)
end

return M
