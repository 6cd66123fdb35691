#!lua name=sfc_1
-- The host's function library (docs/host.md, "The server-side functions").
--
-- Rules: every key is a KEY and every value an ARGV, never spliced into code; every check
-- comes before the first write. Entries have the fields v, kind and data. Times are the
-- server's (TIME), in epoch milliseconds.

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- Whether entry `id` of `work` is pending in `group` for `consumer` (any consumer if nil).
local function pending(work, group, id, consumer)
  local p
  if consumer then
    p = redis.call('XPENDING', work, group, id, id, 1, consumer)
  else
    p = redis.call('XPENDING', work, group, id, id, 1)
  end
  return #p == 1
end

-- XACK and XDEL `ids` (a list) in slices: Lua's unpack takes some 8,000 values at most,
-- and a batch may hold more entries of one job, or more that apply nowhere.
local function ack_delete(work, group, ids)
  for i = 1, #ids, 1000 do
    local j = math.min(i + 999, #ids)
    redis.call('XACK', work, group, unpack(ids, i, j))
    redis.call('XDEL', work, unpack(ids, i, j))
  end
end

-- Create the group at 0 (MKSTREAM); a group that exists already is fine. The caller has
-- checked that `work` is a stream or nothing, so BUSYGROUP is the only possible error.
local function create_group(work, group)
  redis.pcall('XGROUP', 'CREATE', work, group, '0', 'MKSTREAM')
end

-- Apply waits changes: (key index, 'add' | 'nx' | 'rem', member, score) quadruples of
-- `args` from `at`.
local function change_waits(keys, args, at, n)
  for k = 0, n - 1 do
    local i = at + 4 * k
    local key, op = keys[tonumber(args[i])], args[i + 1]
    if op == 'add' then
      redis.call('ZADD', key, args[i + 3], args[i + 2])
    elseif op == 'nx' then
      redis.call('ZADD', key, 'NX', args[i + 3], args[i + 2])
    else
      redis.call('ZREM', key, args[i + 2])
    end
  end
end

-- commit: store one job's evaluation(s) atomically.
-- KEYS: job, history, due, active, work, equipment, seen, then the waits keys it touches
-- ARGV: version, state, order, due ('' none), active ('1' member, '0' not), group, consumer,
--       job id, history maxlen,
--       n_ack, ids..., n_cmd, (kind, data)..., n_hist, (kind, data)...,
--       seen field ('' none), seen ttl ms,
--       n_waits, (key index, 'add'|'nx'|'rem', member, score)..., n_work, (kind, data)...,
--       counter field ('' or absent: none)
-- The work entries are queued (a job-control method's `start`). A counter (a job-control
-- method's, `methodsApplied:Pause`) is counted in the scope's hash, then the last KEY, in
-- the same commit: the count is exact, whichever process applied the method.
-- Returns ok, conflict (the version moved), gone (an entry to ack is no longer pending for
-- this consumer: another took it over), missing (the job is not stored) or duplicate (the
-- event's source/id was already taken).
local function commit(keys, args)
  local job, history, due, active, work, equipment, seen =
    keys[1], keys[2], keys[3], keys[4], keys[5], keys[6], keys[7]
  local group, consumer, job_id = args[6], args[7], args[8]
  local version = redis.call('HGET', job, 'version')
  if not version then return 'missing' end
  if version ~= args[1] then return 'conflict' end
  local i = 10
  local n_ack = tonumber(args[i])
  local acks = {}
  for k = 1, n_ack do
    local id = args[i + k]
    if not pending(work, group, id, consumer) then return 'gone' end
    acks[k] = id
  end
  i = i + n_ack + 1
  local n_cmd = tonumber(args[i])
  local cmd_at = i + 1
  i = i + 2 * n_cmd + 1
  local n_hist = tonumber(args[i])
  local hist_at = i + 1
  i = i + 2 * n_hist + 1
  local seen_field, seen_ttl = args[i], args[i + 1]
  i = i + 2
  if seen_field ~= '' and redis.call('HEXISTS', seen, seen_field) == 1 then
    return 'duplicate'
  end
  local n_waits = tonumber(args[i])
  local waits_at = i + 1
  i = i + 4 * n_waits + 1
  local n_work = tonumber(args[i] or '0')
  local work_at = i + 1
  local counter = args[work_at + 2 * n_work] or ''

  -- the writes
  redis.call('HSET', job, 'state', args[2], 'order', args[3],
    'version', tostring(tonumber(version) + 1), 'due', args[4])
  if args[4] == '' then
    redis.call('ZREM', due, job_id)
  else
    redis.call('ZADD', due, args[4], job_id)
  end
  if args[5] == '1' then
    redis.call('SADD', active, job_id)
  else
    redis.call('SREM', active, job_id)
  end
  change_waits(keys, args, waits_at, n_waits)
  for k = 0, n_cmd - 1 do
    redis.call('XADD', equipment, '*', 'v', '1', 'kind', args[cmd_at + 2 * k],
      'data', args[cmd_at + 2 * k + 1])
  end
  for k = 0, n_hist - 1 do
    redis.call('XADD', history, 'MAXLEN', args[9], '*', 'v', '1',
      'kind', args[hist_at + 2 * k], 'data', args[hist_at + 2 * k + 1])
  end
  for k = 0, n_work - 1 do
    redis.call('XADD', work, '*', 'v', '1', 'kind', args[work_at + 2 * k],
      'data', args[work_at + 2 * k + 1])
  end
  if seen_field ~= '' then
    redis.call('HSET', seen, seen_field, job_id)
    redis.call('HPEXPIRE', seen, seen_ttl, 'FIELDS', 1, seen_field)
  end
  if counter ~= '' then redis.call('HINCRBY', keys[#keys], counter, 1) end
  if n_ack > 0 then ack_delete(work, group, acks) end
  return 'ok'
end

-- ack: acknowledge and delete entries that change no job, and count them.
-- KEYS: work, settings
-- ARGV: group, consumer, counter field ('' none), ids...
local function ack(keys, args)
  local work, settings = keys[1], keys[2]
  local group, consumer, counter = args[1], args[2], args[3]
  local ids = {}
  for k = 4, #args do
    if not pending(work, group, args[k], consumer) then return 'gone' end
    ids[#ids + 1] = args[k]
  end
  if #ids > 0 then ack_delete(work, group, ids) end
  if counter ~= '' then redis.call('HINCRBY', settings, counter, #ids) end
  return 'ok'
end

-- store: Store or StoreAndStart one order.
-- KEYS: job, orders, work, retired
-- ARGV: job id, order, state, expected retired sequence ('' none), stored at, start ('1'/'0'),
--       group, start data
-- Returns ok, exists (the id is taken) or conflict (the retired sequence moved: read again).
local function store(keys, args)
  local job, orders, work, retired = keys[1], keys[2], keys[3], keys[4]
  local job_id = args[1]
  if redis.call('EXISTS', job) == 1 then return 'exists' end
  local last = redis.call('HGET', retired, job_id)
  if (last or '') ~= args[4] then return 'conflict' end
  local t = redis.call('TYPE', work)['ok']
  if t ~= 'none' and t ~= 'stream' then
    return redis.error_reply('WRONGTYPE ' .. work .. ' is not a stream')
  end
  redis.call('HSET', job, 'order', args[2], 'state', args[3], 'version', '1', 'due', '')
  redis.call('ZADD', orders, args[5], job_id)
  create_group(work, args[7])
  if args[6] == '1' then
    redis.call('XADD', work, '*', 'v', '1', 'kind', 'start', 'data', args[8])
  end
  return 'ok'
end

-- sweep: the heartbeat, then the due jobs' ticks (a tick's time is its entry id).
-- KEYS: due, work, heartbeat, active, outage, then a key never written and not read here
-- (a slot being moved answers a move to a call that names it: Store.sweep)
-- ARGV: outage threshold ms, limit
-- Returns {'ok', ticks}, or {'outage', gap}: an outage pass is under way (or began now), and
-- ordinary expiry waits until it ends and every tick it queued has been applied.
local function sweep(keys, args)
  local due, work, heartbeat, active, outage = keys[1], keys[2], keys[3], keys[4], keys[5]
  local threshold, limit = tonumber(args[1]), tonumber(args[2])
  local now = now_ms()
  local last = redis.call('HGET', heartbeat, 'at')
  local gap = redis.call('HGET', heartbeat, 'gap')
  redis.call('HSET', heartbeat, 'at', now)
  if gap then return {'outage', gap} end
  if last and now - tonumber(last) > threshold then
    gap = tostring(now - tonumber(last))
    redis.call('HSET', heartbeat, 'gap', gap, 'since', last)
    redis.call('DEL', outage)
    if redis.call('EXISTS', active) == 1 then
      redis.call('SUNIONSTORE', outage, active)
    end
    return {'outage', gap}
  end
  -- Until the pass's ticks have left the work stream (applied, or dead), a job's due entry
  -- may hold its deadline from before the outage: put back by a recovery `repair`, or by the
  -- commit of another entry, from a hash the outage tick has not moved yet. Popping it now
  -- would time the job out if its tick were applied before the outage tick.
  local settle = redis.call('HMGET', heartbeat, 'settleFrom', 'settleTo')
  if settle[1] and settle[2] then
    if #redis.call('XRANGE', work, settle[1], settle[2], 'COUNT', 1) > 0 then
      return {'ok', '0'}
    end
    redis.call('HDEL', heartbeat, 'settleFrom', 'settleTo')
  end
  local jobs = redis.call('ZRANGE', due, '-inf', now, 'BYSCORE', 'LIMIT', 0, limit)
  for _, j in ipairs(jobs) do
    redis.call('ZREM', due, j)
    redis.call('XADD', work, '*', 'v', '1', 'kind', 'tick', 'data', cjson.encode({job = j}))
  end
  return {'ok', tostring(#jobs)}
end

-- outage: one chunk of an outage pass. Every job that was active when the outage was found
-- gets one tick with outageMs = the gap, exactly once (the pass pops them from a copy of the
-- active set), and leaves the due index until that tick is applied.
-- KEYS: heartbeat, outage, work, due
-- ARGV: limit
-- Returns {'more', n}, or {'done', n} when the pass has ended (or none was under way).
local function outage(keys, args)
  local heartbeat, pass, work, due = keys[1], keys[2], keys[3], keys[4]
  local gap = redis.call('HGET', heartbeat, 'gap')
  if not gap then return {'done', '0'} end
  local jobs = redis.call('SPOP', pass, tonumber(args[1]))
  for _, j in ipairs(jobs) do
    redis.call('ZREM', due, j)
    local id = redis.call('XADD', work, '*', 'v', '1', 'kind', 'tick',
      'data', cjson.encode({job = j, outageMs = tonumber(gap)}))
    -- the range of the pass's ticks, which ordinary expiry waits for (see sweep)
    redis.call('HSETNX', heartbeat, 'settleFrom', id)
    redis.call('HSET', heartbeat, 'settleTo', id)
  end
  if redis.call('SCARD', pass) == 0 then
    redis.call('HDEL', heartbeat, 'gap', 'since')
    redis.call('HSET', heartbeat, 'at', now_ms(), 'lastGap', gap)
    return {'done', tostring(#jobs)}
  end
  return {'more', tostring(#jobs)}
end

-- bury: move a work entry to the dead stream with the reason, ack it, and put its job back
-- on the due index from the hash's due, so that no job is stranded.
-- KEYS: work, dead, due, job (the job's hash; any key of the scope when there is no job)
-- ARGV: group, entry id, reason, job id ('' none), deliveries, then the entry's field/value pairs
local function bury(keys, args)
  local work, dead, due, job = keys[1], keys[2], keys[3], keys[4]
  local group, id, reason, job_id, deliveries = args[1], args[2], args[3], args[4], args[5]
  if not pending(work, group, id, nil) then return 'gone' end
  local entry = {}
  for k = 6, #args do entry[#entry + 1] = args[k] end
  entry[#entry + 1] = 'reason'
  entry[#entry + 1] = reason
  entry[#entry + 1] = 'entry'
  entry[#entry + 1] = id
  entry[#entry + 1] = 'deliveries'
  entry[#entry + 1] = deliveries
  redis.call('XADD', dead, '*', unpack(entry))
  redis.call('XACK', work, group, id)
  redis.call('XDEL', work, id)
  if job_id ~= '' then
    local at = redis.call('HGET', job, 'due')
    if at and at ~= '' then redis.call('ZADD', due, at, job_id) end
  end
  return 'ok'
end

-- repair: set the indexes of one job from its hash, if the version is still the one read.
-- KEYS: job, due, active, then the waits keys it touches
-- ARGV: job id, version, active ('1'/'0'; '-' to change the waits only), n_waits,
--       (key index, 'add'|'nx'|'rem', member, score)...
local function repair(keys, args)
  local job, due, active = keys[1], keys[2], keys[3]
  local job_id = args[1]
  local h = redis.call('HMGET', job, 'version', 'due')
  if not h[1] then
    -- the job is gone (cleared): it has no place in the indexes
    redis.call('SREM', active, job_id)
    redis.call('ZREM', due, job_id)
    local n = tonumber(args[4])
    for k = 0, n - 1 do
      local i = 5 + 4 * k
      if args[i + 1] == 'rem' then redis.call('ZREM', keys[tonumber(args[i])], args[i + 2]) end
    end
    return 'missing'
  end
  if h[1] ~= args[2] then return 'conflict' end
  if args[3] == '-' then
    -- waits only: drop members the job no longer has, e.g. found by an event's offer
    change_waits(keys, args, 5, tonumber(args[4]))
    return 'ok'
  end
  if h[2] and h[2] ~= '' then
    redis.call('ZADD', due, h[2], job_id)
  else
    redis.call('ZREM', due, job_id)
  end
  if args[3] == '1' then
    redis.call('SADD', active, job_id)
  else
    redis.call('SREM', active, job_id)
  end
  change_waits(keys, args, 5, tonumber(args[4]))
  return 'ok'
end

-- clear: remove an ended order, its state, history and index entries, and record its last
-- sequence in retired (with field expiry), so that a job stored again under the same id
-- continues the sequence and no command id is reused.
-- KEYS: job, history, orders, active, due, retired, then the waits keys to leave
-- ARGV: job id, version, last sequence, retired ttl ms, then the waits member of each key
local function clear(keys, args)
  local job, history, orders, active, due, retired =
    keys[1], keys[2], keys[3], keys[4], keys[5], keys[6]
  local job_id = args[1]
  local version = redis.call('HGET', job, 'version')
  if not version then return 'missing' end
  if version ~= args[2] then return 'conflict' end
  redis.call('DEL', job, history)
  redis.call('ZREM', orders, job_id)
  redis.call('SREM', active, job_id)
  redis.call('ZREM', due, job_id)
  for k = 7, #keys do
    redis.call('ZREM', keys[k], args[k - 2])
  end
  redis.call('HSET', retired, job_id, args[3])
  redis.call('HPEXPIRE', retired, args[4], 'FIELDS', 1, job_id)
  return 'ok'
end

-- publish: queue an event only when some job of the scope waits for its type; otherwise drop
-- it and count it in the scope's hash (any process reports the counter).
-- KEYS: waits key of the type, work, settings
-- ARGV: data, counter field
-- Returns the entry id, or 'dropped'.
local function publish(keys, args)
  if redis.call('ZCARD', keys[1]) == 0 then
    redis.call('HINCRBY', keys[3], args[2], 1)
    return 'dropped'
  end
  return redis.call('XADD', keys[2], '*', 'v', '1', 'kind', 'event', 'data', args[1])
end

-- lease: hold a name for a while, against another holder (an MQTT bridge's client id,
-- whose broker session must have one client at a time).
-- KEYS: the lease key
-- ARGV: holder, ttl ms ('0': give it up)
-- Returns ok (held by `holder` now, for ttl; or given up), or the other holder's value.
local function lease(keys, args)
  local holder = redis.call('GET', keys[1])
  if holder and holder ~= args[1] then return holder end
  if args[2] == '0' then
    if holder then redis.call('DEL', keys[1]) end
    return 'ok'
  end
  redis.call('SET', keys[1], args[1], 'PX', args[2])
  return 'ok'
end

redis.register_function('sfc1_commit', commit)
redis.register_function('sfc1_publish', publish)
redis.register_function('sfc1_clear', clear)
redis.register_function('sfc1_ack', ack)
redis.register_function('sfc1_store', store)
redis.register_function('sfc1_sweep', sweep)
redis.register_function('sfc1_outage', outage)
redis.register_function('sfc1_bury', bury)
redis.register_function('sfc1_repair', repair)
redis.register_function('sfc1_lease', lease)
