# frozen_string_literal: true

require "spec_helper"
require "rake"

# rake webhook_inbox:migrate passes --citus to the sidecar's migrate when CITUS is set.
RSpec.describe "rake webhook_inbox:migrate" do
  let(:rake) { Rake::Application.new }

  before do
    Rake.application = rake
    Rake::Task.define_task(:environment)
    load File.expand_path("../../lib/webhook_inbox/rails/tasks.rake", __dir__)
    allow(WebhookInbox.configuration).to receive(:effective_database_url).and_return("postgres://db/app")
  end

  def migrate_args(env)
    got = nil
    allow(WebhookInbox::Sidecar).to receive(:exec) { |*args, **kw| got = [args, kw] }
    old = ENV.to_h.slice("CITUS")
    env.each { |k, v| ENV[k] = v }
    rake["webhook_inbox:migrate"].invoke
    got
  ensure
    ENV.delete("CITUS")
    ENV.update(old) if old
  end

  it "runs migrate, and migrate --citus with CITUS=1" do
    expect(migrate_args({})).to eq([["migrate"], { database_url: "postgres://db/app" }])
    rake["webhook_inbox:migrate"].reenable
    expect(migrate_args("CITUS" => "1")).to eq([["migrate", "--citus"], { database_url: "postgres://db/app" }])
  end
end
