# frozen_string_literal: true

# The gem is published as webhook_inbox_pg (see the gemspec); Bundler requires this file.
require_relative "webhook_inbox"
