# frozen_string_literal: true

require_relative "sidecar_helper"

# The argument checks the functions share (db/functions/arguments.sql and
# webhook_inbox_dispatch_check): a bad argument fails the call with SQLSTATE 22023 and the
# message each function gave when it wrote its own check, and changes nothing.
RSpec.describe "argument checks (db/functions/arguments.sql)", :sidecar do
  before(:all) do
    @pg = ThrowawayPostgres.new
    @db = SidecarHelper::DB.new(@pg)
    @db.psql(<<~SQL)
      CREATE FUNCTION t_error_of(q text) RETURNS text LANGUAGE plpgsql AS $$
      BEGIN
          EXECUTE q;
          RETURN 'no error';
      EXCEPTION WHEN OTHERS THEN
          RETURN SQLSTATE || ' ' || SQLERRM;
      END $$;
    SQL
  end
  after(:all) { @pg&.destroy }

  let(:db) { @db }

  before { db.reset! }

  def error_of(sql)
    db.value("SELECT t_error_of($q$#{sql}$q$)")
  end

  it "names the unrouted policy and the numbers the dispatch refuses, before anything is claimed" do
    db.insert_event("e1", "payment_intent.succeeded", {})
    unrouted = "22023 webhook_inbox: p_unrouted must be wait, ignore, quarantine or retry, not"
    expect(error_of("SELECT * FROM webhook_inbox_dispatch_batch(100, 'bogus', 5, 1000, 1000, 1000)")).to eq("#{unrouted} bogus")
    expect(error_of("SELECT * FROM webhook_inbox_dispatch_batch(100, NULL, 5, 1000, 1000, 1000)")).to eq("#{unrouted} <NULL>")
    expect(error_of("SELECT * FROM webhook_inbox_dispatch('#{SidecarHelper::SCOPE}', 'e1', 'later', 5, 1000, 1000, 1000)"))
      .to eq("#{unrouted} later")
    numbers = "22023 webhook_inbox: p_max_attempts must be >= 1, backoff and unrouted delay non-NULL and >= 0"
    expect(error_of("SELECT * FROM webhook_inbox_dispatch_batch(100, 'wait', 0, 1000, 1000, 1000)")).to eq(numbers)
    expect(error_of("SELECT * FROM webhook_inbox_dispatch_batch(100, 'wait', 5, NULL, 1000, 1000)")).to eq(numbers)
    expect(error_of("SELECT * FROM webhook_inbox_dispatch('#{SidecarHelper::SCOPE}', 'e1', 'wait', 5, 1000, 1000, -1)"))
      .to eq(numbers)
    expect(db.event("e1")).to include(status: "pending", attempts: 0)
    expect(error_of("SELECT * FROM webhook_inbox_dispatch_batch(100, 'ignore', 5, 1000, 1000, 1000)")).to eq("no error")
  end

  it "names the result an effect's or a Ruby run's save refuses" do
    expect(error_of("SELECT * FROM webhook_inbox_outbox_save_scoped('s', 'op', 'me', 'sent', NULL, 200, '', NULL, 5, 1000, 1000)"))
      .to eq("22023 webhook_inbox: p_result must be delivered, retry or quarantine, not sent")
    expect(error_of("SELECT webhook_inbox_ruby_finish('op', 1, 'delivered', NULL, 1, 5, 1000, 1000)"))
      .to eq("22023 webhook_inbox_ruby_finish: p_result must be done, retry or quarantine, not delivered")
    expect(error_of("SELECT webhook_inbox_ruby_save('op', NULL, NULL, 1, 5, 1000, 1000)"))
      .to eq("22023 webhook_inbox_ruby_save: p_result must be done, retry or quarantine, not <NULL>")
    expect(error_of("SELECT webhook_inbox_ruby_finish('op', 1, 'done', NULL, 1, 5, 1000, 1000)")).to eq("no error") # no such run: NULL
  end
end
