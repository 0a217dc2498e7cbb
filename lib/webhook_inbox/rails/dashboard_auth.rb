# frozen_string_literal: true

require "digest"
require "active_support/security_utils"

module WebhookInbox
  module Rails
    # DashboardAuth - whether the dashboard may answer, from configuration.dashboard_auth:
    # - :http_basic: a user and password from the app's credentials (webhook_inbox:
    #   dashboard_user, dashboard_password), else from ENV (ENV_USER, ENV_PASSWORD), compared
    #   in constant time (SHA-256 digests, so neither length shows);
    # - { before_action: :authenticate_admin! }: dashboard_base_controller runs that filter (it
    #   must be in the base's callback chain and defined; conditions on it are the app's);
    # - :router_or_proxy: the named opt-out, for a mount point the router or a proxy protects;
    # - nil: no choice.
    # A choice that is not in force (none, no credentials, a filter the base does not run)
    # closes the dashboard, except in dashboard_open_environments, where it stays open and
    # says so. Never holds on to the credentials; no message names a secret.
    class DashboardAuth
      ENV_USER = "WEBHOOK_INBOX_DASHBOARD_USER"
      ENV_PASSWORD = "WEBHOOK_INBOX_DASHBOARD_PASSWORD"
      CHOICES = "c.dashboard_auth = :http_basic (with a user and password), " \
                "{ before_action: :your_authentication_filter } or :router_or_proxy (see docs/dashboard.md)"

      def initialize(config: WebhookInbox.configuration, rails_env: ::Rails.env.to_s, credentials: nil, env: ENV)
        @config = config
        @rails_env = rails_env.to_s
        @credentials = credentials
        @env = env
      end

      def choice
        @config.dashboard_auth
      end

      # True where no choice leaves the dashboard open (dashboard_open_environments).
      def open_environment?
        Array(@config.dashboard_open_environments).map(&:to_s).include?(@rails_env)
      end

      # nil when the chosen protection is in force for base (the class the dashboard's
      # controllers inherit), else one line saying what is missing.
      def problem(base)
        case choice
        when nil then "no protection chosen: set #{CHOICES}"
        when :http_basic
          return nil if basic_credentials

          "dashboard_auth is :http_basic but no user and password are set (credentials webhook_inbox.dashboard_user " \
            "and webhook_inbox.dashboard_password, or ENV #{ENV_USER} and #{ENV_PASSWORD})"
        when :router_or_proxy then nil
        else
          filter = choice[:before_action]
          return nil if runs?(base, filter)

          "dashboard_auth names before_action #{filter.inspect}, which #{base} does not run " \
            "(dashboard_base_controller #{@config.dashboard_base_controller.to_s.inspect})"
        end
      end

      # The status a request gets while problem(base) is not nil: 403 for a filter the base
      # does not run (the app chose, wrongly), else 401.
      def refusal_status
        choice.is_a?(Hash) ? 403 : 401
      end

      # What protects the dashboard, for doctor and the banner ("HTTP Basic", ...).
      def description
        case choice
        when :http_basic then "HTTP Basic (credentials from #{basic_source})"
        when :router_or_proxy then "the router or a proxy (dashboard_auth :router_or_proxy)"
        when Hash then "#{@config.dashboard_base_controller}'s before_action #{choice[:before_action].inspect}"
        else "nothing"
        end
      end

      # The configured user when given_user and given_password match the configured pair,
      # else nil. Both comparisons always run, on digests.
      def basic_user(given_user, given_password)
        user, password = basic_credentials
        return nil unless user

        same = same?(given_user, user) & same?(given_password, password)
        same ? user : nil
      end

      private

      # [user, password] from the credentials, else from ENV; nil unless both are non-empty.
      def basic_credentials
        pair(credential(:dashboard_user), credential(:dashboard_password)) || pair(@env[ENV_USER], @env[ENV_PASSWORD])
      end

      def basic_source
        pair(credential(:dashboard_user), credential(:dashboard_password)) ? "Rails credentials" : "ENV"
      end

      def pair(user, password)
        [user, password] if [user, password].all? { |v| v.is_a?(String) && !v.empty? }
      end

      def credential(key)
        creds = @credentials || ::Rails.application&.credentials
        creds&.dig(:webhook_inbox, key)
      rescue ActiveSupport::EncryptedFile::MissingKeyError, ActiveSupport::MessageEncryptor::InvalidMessage
        nil # no master key here: the ENV pair, or nothing
      end

      def same?(given, expected)
        ActiveSupport::SecurityUtils.secure_compare(Digest::SHA256.digest(given.to_s), Digest::SHA256.digest(expected))
      end

      def runs?(base, filter)
        return false unless base.respond_to?(:_process_action_callbacks)
        return false unless base.method_defined?(filter) || base.private_method_defined?(filter)

        base._process_action_callbacks.any? { |cb| cb.kind == :before && cb.filter == filter }
      end
    end
  end
end
