# frozen_string_literal: true

require "spec_helper"
require "active_record"
require "rake"
require_relative "../support/receiver_helpers"

# WebhookInbox::Flow and rake webhook_inbox:pause / resume (db/015_pause.sql) through the
# app's ActiveRecord connection: the rule written, the action recorded with ACTOR=, a
# refused target or rate aborting with the database's reason. What the sidecar does with a
# rule is spec/sidecar/pause_spec.rb.
RSpec.describe WebhookInbox::Flow do
  before(:all) do
    pg = TestDatabase.cluster
    @db = "flow_#{SecureRandom.hex(4)}"
    pg.psql("CREATE DATABASE #{@db}", db: "postgres")
    ReceiverHelpers.schema_files.each { |f| pg.psql(File.read(f), db: @db) }
    ActiveRecord::Base.establish_connection(ReceiverHelpers.ar_url(pg).sub(pg.dbname, @db))
    rake = Rake::Application.new
    Rake.application = rake
    Rake::Task.define_task(:environment)
    load File.expand_path("../../lib/webhook_inbox/rails/tasks.rake", __dir__)
  end

  after(:all) { ActiveRecord::Base.remove_connection }

  around do |example|
    ActiveRecord::Base.transaction do
      example.run
      raise ActiveRecord::Rollback
    end
  end

  def conn = ActiveRecord::Base.connection
  def sql(text) = conn.select_value(text)
  def savepoint(&) = ActiveRecord::Base.transaction(requires_new: true, &)

  def task(name, env)
    env.each { |k, v| ENV[k] = v }
    Rake.application["webhook_inbox:#{name}"].tap(&:reenable).invoke
  ensure
    env.each_key { |k| ENV.delete(k) }
  end

  it "rake webhook_inbox:pause / resume TYPE= RATE= ACTOR= write the rule and record the actions" do
    conn.execute("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) " \
                 "SELECT 's', 'e' || i, 'invoice.paid', '{}' FROM generate_series(1, 3) i")
    expect { task("pause", "TYPE" => "invoice.*", "ACTOR" => "ops@host") }
      .to output(/\Apaused route invoice\.\* \(3 pending held; action #\d+\)\n\z/).to_stdout
    expect(described_class.rules(conn)).to match([a_hash_including(kind: "route", target: "invoice.*", paused: true, rate: nil,
                                                                   pending: 3, changed_by: "ops@host")])
    expect { task("resume", "TYPE" => "invoice.*", "RATE" => "2.5", "ACTOR" => "ops@host") }
      .to output(/\Aresumed route invoice\.\* at 2\.5\/s \(0 due now; action #\d+\)\n\z/).to_stdout
    expect(described_class.rules(conn)).to match([a_hash_including(paused: false, rate: 2.5)])
    expect(conn.select_rows("SELECT actor, action, filter->>'target', filter->>'rate' FROM webhook_inbox_actions ORDER BY id"))
      .to eq([["ops@host", "pause", "invoice.*", nil], ["ops@host", "resume", "invoice.*", "2.5"]])
    expect { task("resume", "TYPE" => "invoice.*") }.to output(/resumed route invoice\.\* \(/).to_stdout
    expect(described_class.rules(conn)).to eq([]) # neither paused nor limited: no rule left
  end

  it "publishes pause.webhook_inbox and resume.webhook_inbox with exactly their documented keys" do
    require "active_support/notifications"
    seen = []
    sub = ActiveSupport::Notifications.subscribe(/\A(pause|resume)\.webhook_inbox\z/) { |name, *, p| seen << [name, p] }
    conn.execute("INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload) VALUES ('s', 'e1', 'invoice.paid', '{}')")
    paused = described_class.pause(conn, "route", "invoice.*", actor: "ops@host")
    resumed = described_class.resume(conn, "route", "invoice.*", rate: 2.5, actor: "ops@host")
    expect(seen).to eq([["pause.webhook_inbox", { kind: "route", target: "invoice.*", held: 1, action_id: paused[:action_id],
                                                  actor: "ops@host" }],
                        ["resume.webhook_inbox", { kind: "route", target: "invoice.*", rate: 2.5, released: 0,
                                                   action_id: resumed[:action_id], actor: "ops@host" }]])
    seen.each { |name, p| expect(p.keys).to eq(WebhookInbox::Instrumentation::KEYS[name]) }
  ensure
    ActiveSupport::Notifications.unsubscribe(sub) if sub
  end

  it "aborts without exactly one target, and with the database's reason for a refused one" do
    expect { task("pause", {}) }.to raise_error(SystemExit).and output(/needs one of TYPE=/).to_stderr
    expect { task("pause", "TYPE" => "a", "SCOPE" => "b") }.to raise_error(SystemExit).and output(/needs one of TYPE=/).to_stderr
    expect { savepoint { task("pause", "DESTINATION" => "Not-A-Name") } }
      .to raise_error(SystemExit).and output(/webhook_inbox:pause: a destination name must match/).to_stderr
    expect { savepoint { task("resume", "SCOPE" => "s", "RATE" => "5") } }
      .to raise_error(SystemExit).and output(/not per scope/).to_stderr
    expect { savepoint { task("resume", "TYPE" => "a", "RATE" => "fast") } }
      .to raise_error(SystemExit).and output(/webhook_inbox:resume: invalid input syntax/).to_stderr
    expect(sql("SELECT count(*) FROM webhook_inbox_flow")).to eq(0)
  end
end
