--- Markdown highlighting for the chat, at a cost that does not grow with the conversation
--- (issue 13; ARCHITECTURE.md, "Markdown in the chat").
---
--- The chat's prose (prompts and answers, not its tool rows or notices) is cut into regions by
--- the renderer: a region starts with the first text after a header or a row, and ends at the
--- next row. Only the open region (the message being streamed) is parsed, and only its
--- unsettled part: everything from the start of its last top-level block on. Blocks before
--- that are final (nothing later in markdown changes them), so their highlights stay in the
--- buffer as extmarks and are never computed again. The part is parsed as a string with the
--- markdown parser, its inline and code-block injections included (a block's language when
--- `vim.treesitter.language.add` finds its parser, plain otherwise), and highlighted with the
--- languages' own highlight queries, at most once a frame.
---
--- The buffer itself never gets a treesitter highlighter or regex syntax (window.lua turns
--- them off), so nothing else re-parses the growing chat on a redraw.

local M = {}
local H = {}

--- The highlights' namespace.
M.ns = vim.api.nvim_create_namespace("agent.chat.markdown")
H.ns_start = vim.api.nvim_create_namespace("agent.chat.markdown.start") -- the open region's unsettled start

H.FRAME_MS = 16
-- An unsettled part of more lines than this (a very long code block or list still being
-- written) is settled at its last line anyway; an open code fence is carried over (H.settle).
H.MAX_LINES = 400
-- The same for a part of more bytes than this; a last line longer than this alone (a model
-- writing one huge line) is left plain until it ends.
H.MAX_BYTES = 64 * 1024
-- Captures that are not highlights.
H.skip = { spell = true, nospell = true, conceal = true }

H.open = nil ---@type { buf: integer, mark: integer, prefix: string? }? the region being written
H.dirty = false -- the open region has text not highlighted yet
H.last = 0 -- when the open region was last highlighted (hrtime)
H.deferred = false -- an update waits for the next frame

--- A region of prose starts at row `row` (0-based) of `buf`; the open one ends there.
---@param buf integer
---@param row integer
function M.start(buf, row)
  M.finish(buf, row)
  if require("agent.config").options.render == false then
    return -- `render = false` in setup: the chat stays plain
  end
  local mark = vim.api.nvim_buf_set_extmark(buf, H.ns_start, row, 0, { right_gravity = false })
  H.open = { buf = buf, mark = mark, prefix = nil }
  H.dirty = true
end

--- The open region ends before row `row`: what is left of it is highlighted now, for good.
---@param buf integer
---@param row integer
function M.finish(buf, row)
  local open = H.open
  if not open then
    return
  end
  H.open = nil
  if vim.api.nvim_buf_is_valid(buf) then
    H.highlight(open, row, true)
    vim.api.nvim_buf_del_extmark(buf, H.ns_start, open.mark)
  end
end

--- Text went into the open region: M.update highlights it.
function M.changed()
  if H.open then
    H.dirty = true
  end
end

--- Highlights what was written to the open region since the last time, unless that was less
--- than a frame ago (then it is done at the next frame).
function M.update()
  local open = H.open
  if not (open and H.dirty) then
    return
  end
  local wait = H.FRAME_MS - (vim.uv.hrtime() - H.last) / 1e6
  if wait > 0 then
    if not H.deferred then
      H.deferred = true
      vim.defer_fn(function()
        H.deferred = false
        M.update()
      end, math.ceil(wait))
    end
    return
  end
  H.last, H.dirty = vim.uv.hrtime(), false
  if vim.api.nvim_buf_is_valid(open.buf) then
    H.highlight(open, vim.api.nvim_buf_line_count(open.buf), false)
  end
end

--- Forgets the open region (the chat was cleared).
---@param buf? integer
function M.reset(buf)
  H.open, H.dirty = nil, false
  if buf and vim.api.nvim_buf_is_valid(buf) then
    vim.api.nvim_buf_clear_namespace(buf, M.ns, 0, -1)
    vim.api.nvim_buf_clear_namespace(buf, H.ns_start, 0, -1)
  end
end

-- Helpers ------------------------------------------------------------------------------------

-- Highlights rows from the region's unsettled start to `stop` (exclusive); unless `final`,
-- moves the start to where the part that may still change begins.
function H.highlight(region, stop, final)
  local buf = region.buf
  local start = vim.api.nvim_buf_get_extmark_by_id(buf, H.ns_start, region.mark, {})[1]
  if not start or stop <= start then
    return
  end
  local lines = vim.api.nvim_buf_get_lines(buf, start, stop, false)
  if not final and #lines == 1 and #lines[1] > H.MAX_BYTES then
    return
  end
  vim.api.nvim_buf_clear_namespace(buf, M.ns, start, stop)
  -- Source row r is buffer row r + offset; a carried-over fence is source row 0, not shown.
  local offset = start
  if region.prefix then
    table.insert(lines, 1, region.prefix)
    offset = start - 1
  end
  local source = table.concat(lines, "\n")
  local ok, parser = pcall(vim.treesitter.get_string_parser, source, "markdown")
  if not ok then
    return -- no markdown parser: the chat stays plain
  end
  parser:parse(true)
  parser:for_each_tree(function(tree, ltree)
    H.apply(buf, tree, ltree:lang(), source, offset, start)
  end)
  if not final then
    H.settle(region, parser, lines, offset, stop, #source)
  end
end

-- The captures of one tree as extmarks; an injected language's lie above the markdown ones.
function H.apply(buf, tree, lang, source, offset, first)
  local query = vim.treesitter.query.get(lang, "highlights")
  if not query then
    return
  end
  local base = lang == "markdown" and 100 or (lang == "markdown_inline" and 101 or 102)
  local set_extmark = vim.api.nvim_buf_set_extmark
  for id, node, metadata in query:iter_captures(tree:root(), source, 0, -1) do
    local name = query.captures[id]
    if not H.skip[name] and name:sub(1, 1) ~= "_" then
      local sr, sc, er, ec = node:range()
      sr, er = sr + offset, er + offset
      if sr < first then
        sr, sc = first, 0
      end
      if er > sr or (er == sr and ec > sc) then
        local priority = metadata.priority or (metadata[id] and metadata[id].priority)
        set_extmark(buf, M.ns, sr, sc, {
          end_row = er,
          end_col = ec,
          hl_group = "@" .. name .. "." .. lang,
          priority = tonumber(priority) or base,
          strict = false,
        })
      end
    end
  end
end

-- The deepest last block of the markdown tree: sections nest, so the last block of the last
-- section.
function H.last_block(root)
  local node = root
  while true do
    local count = node:named_child_count()
    local last = count > 0 and node:named_child(count - 1) or nil
    if not last then
      return node ~= root and node or nil
    end
    if last:type() ~= "section" then
      return last
    end
    node = last
  end
end

-- Moves the region's start to its last block: what is above it is final.
function H.settle(region, parser, lines, offset, stop, bytes)
  local tree = parser:trees()[1]
  local block = tree and H.last_block(tree:root())
  if not block then
    return
  end
  local row = block:start()
  local first = region.prefix and 1 or 0
  local to, prefix = nil, nil
  if row > first then
    to = row + offset
  elseif #lines - first > H.MAX_LINES or bytes > H.MAX_BYTES then
    -- One block too long to parse again each frame: settle at the last line (it may still
    -- grow). Inside an open code fence, its opening line is parsed before what follows.
    to = stop - 1
    local delimiters = 0
    for child in block:iter_children() do
      if child:type() == "fenced_code_block_delimiter" then
        delimiters = delimiters + 1
      end
    end
    if block:type() == "fenced_code_block" and delimiters < 2 then
      prefix = lines[row + 1]
    end
  end
  if to then
    region.prefix = prefix
    vim.api.nvim_buf_set_extmark(region.buf, H.ns_start, to, 0, { id = region.mark, right_gravity = false })
  end
end

return M
