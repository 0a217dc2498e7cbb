# frozen_string_literal: true

require "spec_helper"
require_relative "../sidecar/sidecar_helper"

# A session that lands on, or stays on, a server that no longer takes writes (SQLSTATE 25006:
# a standby, or default_transaction_read_only turned on for a switchover) must reconnect and
# let libpq pick a read-write host of the multi-host list again - in the receiver's native
# insert and in the sidecar - instead of failing on the same session forever.
# Two independent clusters A and B stand for the old and the new primary.
RSpec.describe "A server that turns read-only under an open session (25006)", :sidecar do
  before(:all) do
    @a = ThrowawayPostgres.new
    @b = ThrowawayPostgres.new
    @name = "ro_#{SecureRandom.hex(4)}"
    @db_a = SidecarHelper::DB.new(@a, @name)
    @db_b = SidecarHelper::DB.new(@b, @name)
    # An explicit ignore route: an event type without any route waits instead of becoming done.
    [@db_a, @db_b].each { |db| db.psql("INSERT INTO webhook_inbox_routes VALUES ('test.read_only', 'webhook_inbox_ignore')") }
  end
  after(:all) do
    @a&.destroy
    @b&.destroy
  end
  after { @a.alter_system("default_transaction_read_only", nil) }

  let(:scope) { "stripe:acct_ro:#{SecureRandom.hex(3)}" }

  def both(attrs = "")
    user = @a.url[/user=(\S+)/, 1]
    "host=#{@a.socket_dir},#{@b.socket_dir} port=#{@a.port},#{@b.port} dbname=#{@name} user=#{user} #{attrs}".strip
  end

  def ids_on(db)
    db.psql("SELECT event_id FROM webhook_inbox WHERE source_scope = #{db.q(scope)} ORDER BY 1").split("\n")
  end

  def insert(inbox, id)
    inbox.insert(source_scope: scope, event_id: id, event_type: "test.read_only", payload: %({"id":"#{id}"})).status
  end

  it "Inbox#insert: the open session's server turns read-only; the same call reconnects to the writable host" do
    inbox = WebhookInbox::Inbox.new(database_url: both, pool_size: 1, connect_timeout: 2, statement_timeout: 2)
    expect(insert(inbox, "evt_ro_1")).to eq(:accepted)
    expect(ids_on(@db_a)).to eq(["evt_ro_1"])

    @a.alter_system("default_transaction_read_only", "'on'")
    expect(insert(inbox, "evt_ro_2")).to eq(:accepted) # was: StoreError 25006 on every call
    expect(insert(inbox, "evt_ro_3")).to eq(:accepted)
    expect(ids_on(@db_b)).to eq(%w[evt_ro_2 evt_ro_3])
    expect(ids_on(@db_a)).to eq(["evt_ro_1"])
  ensure
    inbox&.close
  end

  it "Inbox#insert: with target_session_attrs=any (the URL's choice) a read-only host fails, the session is dropped, the next call reconnects" do
    inbox = WebhookInbox::Inbox.new(database_url: both("target_session_attrs=any"), pool_size: 1,
                                    connect_timeout: 2, statement_timeout: 2)
    expect(insert(inbox, "evt_any_1")).to eq(:accepted)
    pid = inbox.backend_pids.first
    @a.alter_system("default_transaction_read_only", "'on'")
    expect { insert(inbox, "evt_any_2") }.to raise_error(WebhookInbox::StoreError, /25006/)
    @a.alter_system("default_transaction_read_only", nil)
    expect(insert(inbox, "evt_any_2")).to eq(:accepted)
    expect(inbox.backend_pids.first).not_to eq(pid) # a new session, not the old one reused
    expect(ids_on(@db_a)).to eq(%w[evt_any_1 evt_any_2])
  ensure
    inbox&.close
  end

  it "Inbox#insert: no writable host at all is a StoreError (503) within the deadline, and writes resume after" do
    user = @a.url[/user=(\S+)/, 1]
    inbox = WebhookInbox::Inbox.new(database_url: "host=#{@a.socket_dir} port=#{@a.port} dbname=#{@name} user=#{user}",
                                    pool_size: 1, connect_timeout: 2, statement_timeout: 2)
    @a.alter_system("default_transaction_read_only", "'on'")
    t0 = Process.clock_gettime(Process::CLOCK_MONOTONIC)
    expect { insert(inbox, "evt_none_1") }.to raise_error(WebhookInbox::StoreError, /could not connect/)
    expect(Process.clock_gettime(Process::CLOCK_MONOTONIC) - t0).to be < 4
    @a.alter_system("default_transaction_read_only", nil)
    expect(insert(inbox, "evt_none_1")).to eq(:accepted)
  ensure
    inbox&.close
  end

  it "sidecar: a worker whose server turns read-only reconnects to the writable host and processes there" do
    pid, log = spawn_sidecar("run", "--database-url", both, "--concurrency", "1", "--poll-interval", "200ms",
                             "--backoff-base", "200ms")
    @db_a.insert_event("evt_sc_1", "test.read_only", { "n" => 1 }, scope: scope)
    wait_for(15, 0.05, "evt_sc_1 done on A") { @db_a.event("evt_sc_1", scope: scope)[:status] == "done" }

    @a.alter_system("default_transaction_read_only", "'on'")
    @db_b.insert_event("evt_sc_2", "test.read_only", { "n" => 2 }, scope: scope)
    wait_for(15, 0.05, "evt_sc_2 done on B") { @db_b.event("evt_sc_2", scope: scope)[:status] == "done" }
    expect(Process.waitpid(pid, Process::WNOHANG)).to be_nil # the same process, never restarted
    expect(File.read(log)).to match(/connection_lost .*25006/)
  end
end
