# frozen_string_literal: true

require "json"
require "pg"

# BacklogSustain - `bench/backlog --sustain SECONDS`: does retention keep the inbox at a steady
# size under a steady load (issue 33, item 4)? The real sidecar runs (`run`, its retention on)
# while a connection inserts --rate events per second (a statement every 100 ms) for SECONDS;
# every --every seconds the table's and each index's size, the rows by state, the dead row
# versions and autovacuum's runs are sampled. At the end: the growth of the last third of the
# run against the first third's (it levels off when the last third grows by less than a tenth
# of what the first did), and every inserted event handled exactly once.
#
# Time is compressed: the sidecar's retention needs --retain 3d at least, so each event is
# received 3 days minus --window seconds ago (received_at; it is due at once): it becomes
# prunable --window seconds after its insert, retention empties it (every 2 s here, not 1 h),
# and deletes the emptied row --remember seconds later (--remember-pruned). The steady table
# thus holds about rate x (window + remember) rows, plus what vacuum has not reclaimed yet. Event
# ids are random (an md5), as providers' are: ids in insert order would fill the primary key from
# one side, sequential numbers as text from places that move through the run.
class BacklogSustain
  RULE = 0.1 # levels off: the last third grew by less than this share of the first third's growth

  INDEX_SIZES = "SELECT json_object_agg(c.relname, pg_relation_size(c.oid)) FROM pg_index i JOIN pg_class c " \
                "ON c.oid = i.indexrelid WHERE i.indrelid = 'webhook_inbox'::regclass"

  SAMPLE = <<~SQL
    SELECT json_build_object(
      'table', pg_relation_size('webhook_inbox'),
      'indexes', pg_indexes_size('webhook_inbox'),
      'index', (#{INDEX_SIZES}),
      'pending', (SELECT count(*) FROM webhook_inbox WHERE status = 'pending'),
      'done', (SELECT count(*) FROM webhook_inbox WHERE status = 'done' AND pruned_at IS NULL),
      'emptied', (SELECT count(*) FROM webhook_inbox WHERE pruned_at IS NOT NULL),
      'dead', (SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = 'webhook_inbox'::regclass),
      'autovacuums', (SELECT autovacuum_count FROM pg_stat_user_tables WHERE relid = 'webhook_inbox'::regclass))
  SQL

  INSERT = <<~SQL
    INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, received_at, next_attempt_at)
      SELECT 'bench:sustain', 'evt_' || md5(i::text), 'bench.one', jsonb_build_object('type', 'bench.one', 'n', i),
             now() - interval '3 days' + $3::double precision * interval '1 second', now()
        FROM generate_series($1::bigint, $2::bigint) i
  SQL

  def initialize(pg:, sidecar:, seconds:, rate:, every:, window:, remember:, concurrency:, batch:, out: $stdout)
    @pg = pg
    @sidecar = sidecar
    @seconds = seconds
    @rate = rate
    @every = every
    @window = window
    @remember = remember
    @concurrency = concurrency
    @batch = batch
    @out = out
    @inserted = 0
  end

  # Runs the load; prints the samples and the verdict; returns the JSON-able result. Raises
  # RuntimeError when the sidecar dies or the events were not all handled exactly once.
  def run
    log = File.join(@pg.dir, "sidecar.log")
    pid = spawn(@sidecar, "run", "--database-url", @pg.url, "--concurrency", @concurrency.to_s, "--batch-size", @batch.to_s,
                "--log-events=false", "--retain", "3d", "--retain-interval", "2s", "--remember-pruned", "#{@remember}s",
                out: log, err: log)
    samples = load_and_sample(pid, log)
    drain_and_check(pid, log)
    stop(pid)
    report(samples, retention_runs(log), compact_sizes)
  ensure
    stop(pid) if pid
  end

  private

  def load_and_sample(pid, log)
    conn = PG.connect(@pg.url)
    conn.prepare("insert", INSERT)
    watcher = PG.connect(@pg.url)
    t0 = clock
    samples = [sample(watcher, 0)]
    tick = 0
    next_sample = @every
    while (now = clock - t0) < @seconds
      raise "the sidecar exited during the load:\n#{tail(log)}" if exited?(pid)

      due = ((tick + 1) * 0.1 * @rate).round # events that should be in by the end of this tick
      conn.exec_prepared("insert", [@inserted + 1, due, @window].map(&:to_s)) if due > @inserted
      @inserted = due if due > @inserted
      tick += 1
      if now >= next_sample
        samples << sample(watcher, now)
        next_sample += @every
      end
      pause = tick * 0.1 - (clock - t0)
      sleep pause if pause.positive?
    end
    samples << sample(watcher, clock - t0)
    samples
  ensure
    conn&.close
    watcher&.close
  end

  def sample(conn, at)
    JSON.parse(conn.exec(SAMPLE).getvalue(0, 0)).merge("t" => at.round(1), "inserted" => @inserted)
  end

  # The load stopped: every event inserted is handled once (bench_sink has a primary key).
  def drain_and_check(pid, log)
    deadline = clock + 120
    until @pg.psql("SELECT count(*) FROM webhook_inbox WHERE status = 'pending'").to_i.zero?
      raise "events still pending 120 s after the load stopped:\n#{tail(log)}" if clock > deadline
      raise "the sidecar exited:\n#{tail(log)}" if exited?(pid)

      sleep 0.5
    end
    sunk = @pg.psql("SELECT count(*) FROM bench_sink").to_i
    raise "#{@inserted} events inserted, #{sunk} handled" unless sunk == @inserted
  end

  # Each index's size at the end, then rebuilt (REINDEX) from the same rows: the steady indexes'
  # multiple of their compact size.
  def compact_sizes
    before = JSON.parse(@pg.psql(INDEX_SIZES))
    @pg.psql("REINDEX TABLE webhook_inbox")
    after = JSON.parse(@pg.psql(INDEX_SIZES))
    before.to_h { |ix, b| [ix, [b, after[ix]]] }
  end

  def exited?(pid)
    @stopped = true if Process.waitpid(pid, Process::WNOHANG)
  end

  # The sidecar's last log lines (the cluster, and its directory, go at exit).
  def tail(log)
    File.exist?(log) ? File.readlines(log).last(20).join : "(no sidecar log)"
  end

  # Stops the sidecar once (a reaped pid may belong to another process by the second call).
  def stop(pid)
    return if @stopped

    @stopped = true
    Process.kill("TERM", pid)
    Process.wait(pid)
  rescue Errno::ESRCH, Errno::ECHILD
    nil
  end

  # The sidecar's retention lines (event=retention ... pruned=N forgotten=N): runs and totals.
  def retention_runs(log)
    lines = File.readlines(log).grep(/retention/)
    runs = lines.grep(/\bpruned=\d+ forgotten=\d+/)
    { runs: runs.size, pruned: runs.sum { |l| l[/\bpruned=(\d+)/, 1].to_i },
      forgotten: runs.sum { |l| l[/\bforgotten=(\d+)/, 1].to_i }, failed: lines.grep(/retention_failed/).size }
  end

  def report(samples, retention, compact)
    mb = ->(b) { format("%.1f", b / 1_048_576.0) }
    @out.puts "bench/backlog --sustain #{@seconds}: #{@rate} events/s for #{@seconds} s, sidecar run --concurrency " \
              "#{@concurrency} --batch-size #{@batch} --retain 3d (events prunable #{@window} s after their insert, " \
              "emptied rows deleted #{@remember} s later), one-insert SQL handler; #{@inserted} events, all handled once"
    @out.puts format("  %6s %8s %7s %7s %7s %8s %4s %9s %10s", "t (s)", "inserted", "pending", "done", "emptied", "dead",
                     "avac", "table MB", "indexes MB")
    samples.each do |s|
      @out.puts format("  %6.1f %8d %7d %7d %7d %8d %4d %9s %10s", s["t"], s["inserted"], s["pending"], s["done"],
                       s["emptied"], s["dead"], s["autovacuums"], mb.(s["table"]), mb.(s["indexes"]))
    end
    @out.puts format("  retention: %d runs, %d events emptied, %d emptied rows deleted, %d failed runs", retention[:runs],
                     retention[:pruned], retention[:forgotten], retention[:failed])
    growth = { "table" => thirds(samples) { |s| s["table"] }, "indexes" => thirds(samples) { |s| s["indexes"] } }
    samples.last["index"].each_key { |ix| growth[ix] = thirds(samples) { |s| s["index"][ix] } }
    @out.puts "  growth in the first third -> the last third of the run (levels off: the last under " \
              "#{(RULE * 100).round}% of the first), final size, and for each index its compact size (REINDEX):"
    growth.each do |name, g|
      size, small = compact[name]
      g[:compact] = small
      @out.puts format("    %-34s %8s MB -> %8s MB  %-14s %8s MB%s", name, mb.(g[:first]), mb.(g[:last]),
                       g[:level] ? "levels off" : "still growing", mb.(g[:final]),
                       small ? format("  compact %8s MB (%.2fx)", mb.(small), size.to_f / small) : "")
    end
    { rate: @rate, seconds: @seconds, inserted: @inserted, retention: retention, growth: growth, samples: samples }
  end

  # Growth (bytes) over the first and the last third of the run, by the samples nearest the cuts.
  def thirds(samples)
    at = ->(t) { yield(samples.min_by { |s| (s["t"] - t).abs }) }
    first = at.(@seconds / 3.0) - at.(0)
    last = at.(@seconds) - at.(@seconds * 2 / 3.0)
    { first: first, last: last, final: yield(samples.last), level: last <= RULE * first }
  end

  def clock
    Process.clock_gettime(Process::CLOCK_MONOTONIC)
  end
end
