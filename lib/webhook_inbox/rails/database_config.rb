# frozen_string_literal: true

module WebhookInbox
  module Rails
    # DatabaseConfig - the app's ActiveRecord database settings as a libpq conninfo string,
    # for the gem's own connections and the sidecar when DATABASE_URL and
    # WebhookInbox.configure's database_url are not set (config/database.yml is enough).
    module DatabaseConfig
      # ActiveRecord keys that are spelled differently in libpq.
      RENAMED = { database: :dbname, username: :user }.freeze
      # Every libpq connection keyword ActiveRecord may carry (others, e.g. pool, are Rails').
      LIBPQ_KEYS = %i[
        host hostaddr port dbname user password passfile connect_timeout client_encoding options
        application_name keepalives keepalives_idle keepalives_interval keepalives_count tcp_user_timeout
        sslmode sslcompression sslcert sslkey sslpassword sslrootcert sslcrl sslcrldir sslsni requirepeer
        ssl_min_protocol_version ssl_max_protocol_version gssencmode krbsrvname gsslib service
        target_session_attrs channel_binding load_balance_hosts
      ].freeze

      module_function

      # The primary database of the current environment, as conninfo.
      def current
        conninfo(::ActiveRecord::Base.connection_db_config.configuration_hash)
      end

      # key='value' pairs (quotes and backslashes escaped) for the libpq keys in config.
      def conninfo(config)
        config.filter_map do |key, value|
          key = RENAMED.fetch(key.to_sym, key.to_sym)
          next if value.nil? || value.to_s.empty? || !LIBPQ_KEYS.include?(key)

          "#{key}='#{value.to_s.gsub(/[\\']/) { |c| "\\#{c}" }}'"
        end.join(" ")
      end
    end
  end
end
