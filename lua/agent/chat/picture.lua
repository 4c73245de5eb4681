--- An image of a prompt shown as a picture under its row in the chat (:help agent-images),
--- where snacks.nvim's image support or image.nvim is installed and set up; elsewhere the row
--- is all there is. Either plugin draws through the terminal's graphics protocol, so whether a
--- picture appears is theirs to decide: a failure never interrupts the chat, and the last one
--- is kept for :checkhealth agent.

local M = {}
local H = {}

M.last_error = nil ---@type string? why the last picture was not drawn

--- What was drawn and is still up, each with how to take it down.
---@type (fun())[]
H.placed = {}

--- Which plugin would draw a picture: "snacks", "image.nvim", or nil.
---@return string?
function M.viewer()
  local snacks = rawget(_G, "Snacks")
  if type(snacks) == "table" and type(snacks.image) == "table" and snacks.image.placement then
    return "snacks"
  end
  local ok, image = pcall(require, "image")
  if ok and type(image) == "table" and type(image.from_file) == "function" then
    return "image.nvim"
  end
  return nil
end

--- Draws the image saved at `file` below line `row` (0-based) of `buf`.
---@param buf integer
---@param row integer
---@param file string
function M.show(buf, row, file)
  local viewer = M.viewer()
  if not viewer or vim.uv.fs_stat(file) == nil then
    return
  end
  local ok, err = pcall(H[viewer], buf, row, file)
  if not ok then
    M.last_error = ("%s could not draw %s: %s"):format(viewer, file, tostring(err))
  elseif type(err) == "function" then
    H.placed[#H.placed + 1] = err
  end
end

--- Takes down every picture drawn (the chat is cleared: a branch switch, a new conversation,
--- a resume), so none stays over text it no longer belongs to.
function M.clear()
  local placed = H.placed
  H.placed = {}
  for _, take_down in ipairs(placed) do
    pcall(take_down)
  end
end

H["snacks"] = function(buf, row, file)
  local placement =
    Snacks.image.placement.new(buf, file, { pos = { row + 1, 0 }, inline = true, max_width = 60, max_height = 16 })
  return placement and function()
    placement:close()
  end
end

H["image.nvim"] = function(buf, row, file)
  local win = vim.fn.bufwinid(buf)
  if win == -1 then
    return
  end
  local image = require("image").from_file(file, {
    window = win,
    buffer = buf,
    x = 2,
    y = row + 1,
    with_virtual_padding = true,
    max_width_window_percentage = 60,
    max_height_window_percentage = 40,
  })
  if image then
    image:render()
    return function()
      image:clear()
    end
  end
end

return M
