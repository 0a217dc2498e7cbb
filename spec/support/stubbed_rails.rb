# frozen_string_literal: true

require "stringio"
require "logger"
require "active_support/error_reporter"
require "active_support/tagged_logging"

# StubbedRails - for an example of what the Ruby side tells an app: `Rails` stubbed (RSpec's
# stub_const, undone after the example) with a real ActiveSupport::ErrorReporter behind
# Rails.error, tracker subscribed to it (anything with #report(error, handled:, severity:,
# context:, source:), as Sentry's), and a tagged logger into log behind Rails.logger.
module StubbedRails
  def rails_with(tracker, log = StringIO.new)
    reporter = ActiveSupport::ErrorReporter.new.tap { |r| r.subscribe(tracker) }
    logger = ActiveSupport::TaggedLogging.new(Logger.new(log))
    stub_const("Rails", Module.new.tap do |m|
      m.define_singleton_method(:error) { reporter }
      m.define_singleton_method(:logger) { logger }
    end)
  end
end
