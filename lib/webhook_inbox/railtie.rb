# frozen_string_literal: true

require "rails/railtie"

module WebhookInbox
  # Railtie - wires the gem into Rails: the logger defaults to Rails.logger (lines carry
  # provider, scope, event id and outcome only), and `rails g webhook_inbox:install`
  # is found under lib/generators. Loaded by `require "webhook_inbox"` only when Rails is.
  class Railtie < ::Rails::Railtie
    initializer "webhook_inbox.logger" do
      WebhookInbox.configuration.logger ||= ::Rails.logger
    end

    initializer "webhook_inbox.filter_parameters" do |app|
      # Signature headers and bodies never appear in Rails' own parameter logs either.
      app.config.filter_parameters |= %i[secret signature]
    end

    generators do
      require_relative "../generators/webhook_inbox/install/install_generator"
    end
  end
end
