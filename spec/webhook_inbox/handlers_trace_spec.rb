# frozen_string_literal: true

require "spec_helper"
require "active_record"
require "webhook_inbox/handlers"
require_relative "../support/receiver_helpers"
require_relative "../support/forked"
require_relative "../support/in_memory_spans"

# Issue 31 item 1 (the Ruby worker): a Ruby handler's run continues the receipt's trace: a
# webhook_inbox.handle span, the child of the context stored with the event (the run's outbox
# row inherits it, db/functions/ruby_handlers.sql), with ids, names and the outcome, never the
# payload; the job it enqueues keeps the handle span's context, and its performance by the
# JobRunner is a webhook_inbox.effect span, the handle span's child. A real OpenTelemetry SDK with an in-memory exporter, in a forked child (this process
# never loads the API); without a context, no span.
RSpec.describe "Ruby handler runs in the receipt's trace" do
  TRACE = "0af7651916cd43dd8448eb211c80319c"
  RECEIPT_SPAN = "b7ad6b7169203331"

  before(:all) do
    @pg = TestDatabase.cluster
    @db = ReceiverHelpers.schema_database(@pg, "handlers_trace")
    @url = ReceiverHelpers.ar_url(@pg).sub(@pg.dbname, @db)
  end

  def sql(text) = @pg.psql(text, db: @db).strip

  it "runs the handler in a webhook_inbox.handle span whose parent is the stored receipt span, its job in an effect span under it" do
    sql(<<~SQL)
      INSERT INTO webhook_inbox (source_scope, event_id, event_type, payload, trace_context) VALUES
        ('s', 'evt_traced', 'order.paid', '{"card": "SECRET_PAYLOAD"}', '00-#{TRACE}-#{RECEIPT_SPAN}-01'),
        ('s', 'evt_plain', 'order.paid', '{"card": "SECRET_PAYLOAD"}', NULL)
    SQL
    url = @url
    spans = Forked.call do
      finished = InMemorySpans.configure
      require "active_job"
      require "webhook_inbox/effects/job_runner"
      job = Class.new(ActiveJob::Base) do
        def self.name = "TraceSpecJob"
        def perform(_id) = nil
      end
      Object.const_set(:TraceSpecJob, job)
      ActiveJob::Base.logger = Logger.new(File::NULL)
      WebhookInbox::Effects.install!
      ActiveRecord::Base.establish_connection(url)
      reg = WebhookInbox::Handlers::Registry.new.tap { |r| r.add(["order.paid"], ->(e) { TraceSpecJob.perform_later(e.id) }, name: "h") }
      conn = ActiveRecord::Base.connection
      conn.select_value("SELECT webhook_inbox_ruby_register('#{JSON.generate(reg.pairs)}')")
      conn.select_value("SELECT count(*) FROM webhook_inbox_dispatch_batch(100, 'wait', 10, 1000, 3600000, 60000)")
      results = WebhookInbox::Handlers::Runner.new(reg).run_batch(conn, 10)
      raise "runs: #{results.map(&:status)}" unless results.map(&:status) == %w[delivered delivered]

      jobs = WebhookInbox::Effects::JobRunner.new.run_batch(conn, 10)
      raise "jobs: #{jobs.map(&:status)}" unless jobs.map(&:status) == %w[delivered delivered]

      finished.call
    end
    expect(spans.map { |s| s[:name] }.sort).to eq(%w[webhook_inbox.effect webhook_inbox.handle]) # none for evt_plain
    span = spans.find { |s| s[:name] == "webhook_inbox.handle" }
    expect(span).to include(name: "webhook_inbox.handle", trace: TRACE, parent: RECEIPT_SPAN, kind: :internal)
    effect = spans.find { |s| s[:name] == "webhook_inbox.effect" }
    expect(effect).to include(trace: TRACE, parent: span[:span])
    expect(effect[:attrs]).to include("webhook_inbox.destination" => "active_job", "webhook_inbox.result" => "delivered",
                                      "webhook_inbox.job_class" => "TraceSpecJob", "webhook_inbox.attempt" => 1)
    expect(span[:attrs]).to include("webhook_inbox.source_scope" => "s", "webhook_inbox.event_id" => "evt_traced",
                                    "webhook_inbox.event_type" => "order.paid", "webhook_inbox.handler" => "h",
                                    "webhook_inbox.attempt" => 1, "webhook_inbox.result" => "done")
    expect((span[:attrs].values + effect[:attrs].values).join(" ")).not_to include("SECRET_PAYLOAD")
    expect(sql("SELECT trace_context FROM webhook_inbox_outbox WHERE destination = 'ruby' AND source_event_id = 'evt_traced'"))
      .to eq("00-#{TRACE}-#{RECEIPT_SPAN}-01")
  end
end
