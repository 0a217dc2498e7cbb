# frozen_string_literal: true

require_relative "sidecar_helper"

# A handler that kills its own backend (here pg_terminate_backend(pg_backend_pid()), a FATAL
# no savepoint can catch; a segfault or an OOM kill looks the same to the worker). On a
# cluster of its own: these tests end backends.
RSpec.describe "webhook-inbox-sidecar with a handler that kills its backend", :sidecar do
  before(:all) do
    @pg = ThrowawayPostgres.new
    @db = SidecarHelper::DB.new(@pg)
  end
  after(:all) { @pg&.destroy }

  let(:db) { @db }
  let(:args) { ["--database-url", db.url, "--max-attempts", "3", "--backoff-base", "100ms", "--backoff-cap", "200ms"] }

  before do
    db.reset!
    db.psql(<<~SQL)
      CREATE OR REPLACE FUNCTION t_maybe_die(ev webhook_inbox) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
          IF ev.payload ->> 'die' = 'yes' THEN
              PERFORM pg_terminate_backend(pg_backend_pid());
              PERFORM pg_sleep(5); -- the FATAL arrives at the next interrupt check
          END IF;
          RETURN 'ok';
      END $$;
      INSERT INTO webhook_inbox_routes VALUES ('test.maybe_die', 't_maybe_die') ON CONFLICT DO NOTHING;
    SQL
    # The poison event is the oldest: every batch claims it first.
    db.insert_event("evt_poison", "test.maybe_die", { "die" => "yes" })
    5.times { |i| db.insert_event("evt_good#{i}", "test.maybe_die", { "die" => "no" }) }
  end

  def good_done
    db.int("SELECT count(*) FROM webhook_inbox WHERE event_id LIKE 'evt_good%' AND status = 'done'")
  end

  it "run --once charges the poison event, processes the others and terminates" do
    status, _out, err = sidecar("run", "--once", *args, timeout: 60)
    expect(status.exitstatus).to eq(0), err
    expect(good_done).to eq(5)
    ev = db.event("evt_poison")
    expect(ev[:attempts]).to be_between(1, 3)
    expect(ev[:status]).to eq(ev[:attempts] == 3 ? "quarantined" : "pending")
    expect(ev[:last_error]).to include("connection lost while the handler ran")
    expect(err).to include("msg=careful_mode", "msg=connection_lost_event")
    expect(err).not_to include('"die"') # never the payload
  end

  it "quarantines the poison event at --max-attempts while the queue moves on" do
    pid, log = spawn_sidecar("run", *args, "--poll-interval", "100ms")
    wait_for(30, 0.05, "the poison event in quarantine") { db.event("evt_poison")[:status] == "quarantined" }
    wait_for(10, 0.05, "the good events") { good_done == 5 }
    ev = db.event("evt_poison")
    expect(ev[:attempts]).to eq(3)
    expect(ev[:last_error]).to include("08006: connection lost while the handler ran")

    # Nothing stalls behind it: a new event is processed, and nobody kills a backend any more.
    db.insert_event("evt_after", "test.maybe_die", { "die" => "no" })
    wait_for(10, 0.05, "the event after") { db.event("evt_after")[:status] == "done" }
    lost = File.read(log).scan("msg=connection_lost ").size
    sleep 0.5
    expect(File.read(log).scan("msg=connection_lost ").size).to eq(lost)
    # Bounded: the first batch of each of the 2 workers, then per attempt at most one loss
    # per worker (another careful worker may claim the event before the first charges it).
    expect(lost).to be <= 2 * (1 + 3)

    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
    expect(File.read(log)).to match(/event_id=evt_poison .*outcome=quarantined attempts=3/)
  end

  it "leaves careful mode by its deadline when fewer events than the batch size come after the loss" do
    # --batch-size 20: careful mode counts 20 one-event transactions, and only 6 events exist.
    pid, log = spawn_sidecar("run", *args, "--poll-interval", "100ms", "--concurrency", "1", "--batch-size", "20")
    wait_for(30, 0.05, "the poison event in quarantine") { db.event("evt_poison")[:status] == "quarantined" }
    wait_for(10, 0.05, "the good events") { good_done == 5 }
    wait_for(45, 0.2, "careful mode ended") { File.read(log).include?("msg=careful_mode_end") }
    expect(File.read(log)).to match(/msg=careful_mode_end .*reason=deadline/)
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
  end

  it "with --batch-size 1 and one worker, too" do
    pid, log = spawn_sidecar("run", *args, "--poll-interval", "100ms", "--concurrency", "1", "--batch-size", "1")
    wait_for(30, 0.05, "the poison event in quarantine") { db.event("evt_poison")[:status] == "quarantined" }
    wait_for(10, 0.05, "the good events") { good_done == 5 }
    expect(db.event("evt_poison")[:attempts]).to eq(3)
    Process.kill("TERM", pid)
    expect(wait_exit(pid)&.exitstatus).to eq(0)
    expect(File.read(log)).to include("msg=careful_mode_end")
  end
end
