# frozen_string_literal: true

require "open3"
require_relative "../spec_helper"
require_relative "../support/citus_cluster"
require_relative "../support/citus_events"
require_relative "../sidecar/sidecar_helper"

# A worker backend serving the sidecar stays within tens of MB however many events it handles
# (issue 30). With a row handler inserting into a co-located table, a reused (generic) plan of that
# INSERT makes Citus 13.2 plan the shard's statement again at every local execution and keep every
# copy in the session: 15-20 kB an event, 6,000 events grew a backend by about 100 MB. The sidecar
# closes a direct worker session once its memory contexts pass 32 MB (read every 500 events; every
# 2,000 events where its role cannot read them), and has Citus close its cached connections every
# 2,000 events through the coordinator (sidecar/src/citus/citus.c). Skipped with the reason when
# Citus is not installed.
RSpec.describe "Citus: a worker session's memory under the sidecar's batches" do
  include CitusClusterSpec
  include CitusEvents

  # Events per example, about half of them on each worker's shards.
  def events = 12_000

  # The growth allowed to one worker backend's private memory: its caches (about 8 MB) and up to
  # 32 MB of plans and 500 events more (direct), or 2,000 events' (through the coordinator);
  # unbounded, 6,000 events grew it by about 100 MB.
  def growth_mb = 60

  let(:bin) { SidecarHelper.binary }

  before(:all) do
    skip "needs /proc (Linux) to read a backend's memory" unless File.exist?("/proc/self/status")
    migrate_citus!
    CitusEvents.create_handler(@cluster, "mem")
    # A sidecar role that may not read its session's memory (no pg_read_all_stats).
    @cluster.psql("CREATE ROLE wi_plain LOGIN; GRANT ALL ON ALL TABLES IN SCHEMA public TO wi_plain; " \
                  "GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO wi_plain")
  end

  def events_name = "mem"

  # Private resident memory of a process in kB (0 once it is gone).
  def rss_anon_kb(pid)
    File.read("/proc/#{pid}/status")[/^RssAnon:\s+(\d+)/, 1].to_i
  rescue Errno::ENOENT, Errno::ESRCH
    0
  end

  # The client backends of each worker but psql's own: the sidecar's sessions (direct) or
  # Citus' connections from the coordinator.
  def worker_backends
    cluster.workers.flat_map do |w|
      w.psql("SELECT pid FROM pg_stat_activity WHERE backend_type = 'client backend' " \
             "AND pid <> pg_backend_pid()").split.map(&:to_i)
    end
  end

  # Runs `run --once` (one connection, batches of 20) over the pending events while sampling the
  # workers' backends; returns { pid => [first kB, peak kB] }. The sidecar's output in @out.
  def run_sampled(*extra, url: cluster.url)
    seen = Hash.new { |h, k| h[k] = [] }
    done = false
    sampler = Thread.new do
      until done
        worker_backends.each { |pid| (kb = rss_anon_kb(pid)).positive? && seen[pid] << kb }
        sleep 0.2
      end
    end
    @out, st = Open3.capture2e(bin, "run", "--once", "--database-url", url, "--concurrency", "1",
                               "--batch-size", "20", "--log-level", "info", "--log-events=false", *extra)
    done = true
    sampler.join
    raise @out unless st.success?

    seen.transform_values { |kbs| [kbs.first, kbs.max] }
  end

  def expect_bounded(mem, prefix)
    expect(states(prefix)).to eq("done 0 x#{events}")
    expect(runs(prefix)).to eq("#{events} #{events}")
    growth = mem.transform_values { |first, peak| ((peak - first) / 1024.0).round(1) }
    expect(mem.size).to be >= 2 # a backend per worker at least, sampled while it worked
    expect(growth.values.max).to be < growth_mb, "worker backends grew (MB): #{growth}"
  end

  it "bounds the worker backend of a direct session (--citus-direct), every event once" do
    receive("dir", events)
    expect_bounded(run_sampled, "dir")
  end

  it "bounds a direct session by its events where the sidecar's role cannot read its memory, every event once" do
    receive("pln", events)
    expect_bounded(run_sampled(url: cluster.url.sub(/user=\S+/, "user=wi_plain")), "pln")
    expect(@out.scan("msg=citus_node_memory_unread").size).to eq(2) # once per worker
    expect(@out).to include("permission denied for view pg_backend_memory_contexts")
  end

  it "bounds Citus' connection serving the batches through the coordinator (--citus-direct=false), every event once" do
    receive("crd", events)
    expect_bounded(run_sampled("--citus-direct=false"), "crd")
  end
end
