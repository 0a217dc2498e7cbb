# frozen_string_literal: true

module WebhookInbox
  # Verifies webhook signatures over the raw body in native code.
  #
  #   v = WebhookInbox::Verifier.new(:stripe, secrets: ["whsec_..."], tolerance: 300)
  #   event = v.verify(request.raw_post, request.headers, now: Time.now)
  #   event.provider, event.event_id, event.event_type, event.timestamp, event.body
  #
  # Providers are data: one entry each in ext/webhook_inbox/providers.c (headers, signed
  # content, algorithm, key form, where id/type/time come from, tolerance, challenge), read
  # here through Verifier.provider_table; docs/providers.md's table is generated from it
  # (ProviderTable). :svix is an alias of :standard_webhooks; :didit takes allow_simple:
  # true to also accept X-Signature-Simple; :hmac is generic (algorithm:, encoding:,
  # prefix:, signature_header:, timestamp_header:, id_header:, template: such as
  # "{timestamp}.{body}"; a timestamp_header must be signed by the template, else
  # ConfigurationError: an unsigned time check stops no replay).
  #
  # Nothing the signature does not cover decides an event's identity or time:
  # - event_id: :body_sha256 makes the id the SHA-256 of the signed body (for Didit V2, of
  #   the canonical form it signs). It is the default where the provider's id travels in a
  #   header the signature does not cover - GitHub, Shopify, and :hmac with an id_header:
  #   its template does not sign as {id} - so a captured body re-sent with a new delivery id
  #   (and another X-GitHub-Event or X-Shopify-Topic) is a duplicate, not a new event. The
  #   price: two deliveries with byte-identical bodies count as one. event_id: :provider
  #   keeps the header's id (the earlier default; docs/providers.md says what an upgrade does). The
  #   type of such an event still comes from an unsigned header: a hint for routing, never
  #   proof of what the provider sent.
  # - A body whose top-level key the id, type or time is read from occurs twice is refused
  #   (:duplicate_key): the inbox would store the first value, jsonb keeps the last.
  # - Didit: the time is the body's signed timestamp field only; X-Timestamp is covered by
  #   no Didit signature and never read (no field: :missing_timestamp). X-Signature-Simple
  #   (allow_simple: true) signs timestamp, session_id, status and webhook_type, nothing
  #   else: such an event's id is the SHA-256 of those four fields, its body (Event#body) is
  #   a JSON object of those four alone, and Event#body_signed is false. Fetch anything
  #   else (the decision) from Didit's API.
  #
  # JWT-signed providers: :vonage (secret: the signature secret; HS256 token in Authorization:
  # Bearer, claim payload_hash) and :plaid (secrets: Plaid's webhook verification keys, each a
  # JWK JSON String; the token's kid picks one). The token must name exactly that alg, its
  # claim must be the body's SHA-256 and its iat within the tolerance.
  #
  # :mailgun reads its signature from the body and signs timestamp + token only (the token is
  # the event id; event-data is unsigned). :postmark is not signed at all: secrets are
  # "user:password" HTTP Basic credentials, which authenticate the sender, not the body.
  # :paddle_classic takes Paddle's PEM public key and verifies the form's p_signature (RSA-SHA1
  # over the other fields, sorted and PHP-serialized). :braintree takes "public_key:private_key"
  # pairs and verifies the form's bt_signature over bt_payload (the type is the XML's kind);
  # #braintree_challenge answers the bt_challenge GET of Braintree's URL check.
  # :adyen takes the hex HMAC key and verifies every notification item (one event per delivery).
  # :paypal takes "WEBHOOK_ID:CERT_ID:<PEM certificate>" secrets (pinned: the first certificate
  # of the PEM is the key, the rest are not read) and verifies RSA-SHA256 over transmission
  # id|time|webhook id|CRC-32 of the body. A PAYPAL-CERT-URL off PayPal's certificate endpoint
  # is refused; one naming an unconfigured id is :unknown_key, unless fetch_certificates: is on
  # (true: PaypalCertificates.default; or a PaypalCertificates): then that certificate is
  # fetched from the URL once (chain and subject checked, see PaypalCertificates), its key
  # parsed once and cached, and the delivery verified with it for each configured webhook id
  # (a secret may then be the bare "WEBHOOK_ID"). A fetch that fails is
  # :certificate_unavailable (the Receiver answers 503: PayPal retries).
  #
  # URL-signed providers (:twilio, :square, :hubspot; :hmac with {url} or {method} in its
  # template) sign the URL they called. Behind a proxy or a TLS terminator the Rack env's
  # scheme, host and path are not that URL: give public_url: "https://example.com/hooks/twilio"
  # (the URL as configured at the provider, without its query; the request's query string is
  # appended). Without it the URL is rebuilt from the Rack env (rack.url_scheme, HTTP_HOST or
  # SERVER_NAME/SERVER_PORT, SCRIPT_NAME + PATH_INFO, QUERY_STRING) and never from
  # X-Forwarded-* headers, which the sender of a replay could set to another endpoint's URL.
  # :twilio takes the auth token and a SharedKey secret alike (secrets: [token, shared_key]):
  # X-Twilio-Webhooks-Signature-Settings names the algorithm (HMAC_SHA256; absent: HMAC_SHA1).
  #
  # Secrets are handed to the C core (which keeps only HMAC key states, wiped when the
  # verifier is collected) and are never kept in Ruby instance variables, messages or
  # #inspect. Failures raise VerificationError with a #reason Symbol.
  class Verifier
    PROVIDERS = provider_table.to_h { |p| [p[:name], p] }.freeze
    ALIASES = { svix: :standard_webhooks }.freeze
    SCHEMES = (PROVIDERS.keys + ALIASES.keys).freeze
    ALGORITHMS = { sha1: 0, sha256: 1, sha512: 2 }.freeze
    ENCODINGS = { hex: 0, base64: 1 }.freeze
    EVENT_IDS = %i[provider body_sha256].freeze
    DEFAULT_TOLERANCE = 300
    DEFAULT_MAX_BODY_BYTES = 1 << 20

    attr_reader :scheme, :tolerance, :max_body_bytes, :event_id

    # tolerance: seconds either way, or nil to skip the time check (not recommended); by
    # default the provider's, as its SDK (Paddle 5, Linear 60, Calendly 180, else 300).
    # secrets: a String or an Array of Strings; any may match (rotation). [] is allowed
    # (every #verify then fails with :no_secret); an empty String or one with surrounding
    # whitespace raises ConfigurationError.
    def initialize(scheme, secrets:, tolerance: :provider, max_body_bytes: DEFAULT_MAX_BODY_BYTES,
                   allow_simple: false, legacy_sha1: false, algorithm: :sha256, encoding: :hex, prefix: nil,
                   signature_header: nil, timestamp_header: nil, id_header: nil, template: nil, event_id: nil,
                   public_url: nil, fetch_certificates: false)
      @scheme = ALIASES.fetch(scheme, scheme)
      raise ConfigurationError, "legacy_sha1 applies to :github only" if legacy_sha1 && @scheme != :github

      entry_name = legacy_sha1 ? :github_sha1 : @scheme
      entry = PROVIDERS.fetch(entry_name) do
        raise ConfigurationError, "unknown scheme #{scheme.inspect} (one of #{SCHEMES.join(", ")})"
      end
      tolerance = entry[:tolerance] || DEFAULT_TOLERANCE if tolerance == :provider
      unless tolerance.nil? || (tolerance.is_a?(Integer) && tolerance >= 0)
        raise ConfigurationError, "tolerance must be a non-negative Integer or nil"
      end
      unless max_body_bytes.is_a?(Integer) && max_body_bytes.positive?
        raise ConfigurationError, "max_body_bytes must be a positive Integer"
      end
      secrets = [] if secrets.nil?
      secrets = [secrets] if secrets.is_a?(String)
      unless secrets.is_a?(Array) && secrets.all?(String)
        raise ConfigurationError, "secrets must be a String or an Array of Strings"
      end
      alg = ALGORITHMS.fetch(algorithm) { raise ConfigurationError, "algorithm must be one of #{ALGORITHMS.keys.join(", ")}" }
      enc = ENCODINGS.fetch(encoding) { raise ConfigurationError, "encoding must be :hex or :base64" }
      if @scheme != :hmac && (signature_header || timestamp_header || id_header || template || prefix)
        raise ConfigurationError, "signature_header, timestamp_header, id_header, template and prefix apply to :hmac only"
      end
      # :body_sha256 by default where the provider's id is in a header no signature covers.
      header_id_unsigned = @scheme == :hmac ? id_header && !template.to_s.include?("{id}") : !entry[:id_signed]
      event_id ||= header_id_unsigned ? :body_sha256 : :provider
      unless EVENT_IDS.include?(event_id)
        raise ConfigurationError, "event_id must be :provider or :body_sha256"
      end
      signed = @scheme == :hmac ? template.to_s : entry[:template].to_s
      @signs_url = signed.include?("{url}")
      @signs_method = signed.include?("{method}")
      @public_url = checked_public_url(public_url)
      @certificates = certificate_source(fetch_certificates, secrets)
      @tolerance = tolerance
      @event_id = event_id
      @id_signed = event_id == :body_sha256 || !header_id_unsigned
      @max_body_bytes = max_body_bytes
      _setup(@scheme, entry_name.to_s, tolerance, max_body_bytes, allow_simple, alg, enc, prefix,
             header_name(signature_header), header_name(timestamp_header), header_name(id_header),
             template, secrets, event_id == :body_sha256)
    end

    # Verifies body (the raw bytes, String) against headers (a Hash with any key spelling,
    # a Rack env, or ActionDispatch::Http::Headers). now: Time, Integer or nil (Time.now).
    # Returns an Event; raises VerificationError.
    # URL-signed providers need public_url: or a Rack env (ConfigurationError otherwise).
    def verify(body, headers, now: nil)
      headers = headers.env if !headers.is_a?(Hash) && headers.respond_to?(:env)
      _verify(body, headers, now, (request_url(headers) if @signs_url),
              (headers["REQUEST_METHOD"] || "POST" if @signs_method))
    rescue VerificationError => e
      raise unless @certificates && e.reason == :unknown_key

      fetched_verifier(cert_url(headers)).verify(body, headers, now: now)
    end

    # Braintree's webhook URL check (a GET with ?bt_challenge=): the answer
    # "public_key|hex(HMAC-SHA1 of the challenge under SHA-1(private key))" for the first
    # secret, as Braintree's SDKs' WebhookNotification.verify gives it. The challenge must be 20
    # to 32 lowercase hex digits (the SDKs' rule): else VerificationError :malformed_payload;
    # no secret: :no_secret.
    def braintree_challenge(challenge)
      raise ConfigurationError, "bt_challenge is Braintree's (this verifier is #{@scheme})" unless @scheme == :braintree

      _braintree_challenge(challenge.to_s)
    end

    # True when the signature covers every Event#event_id this verifier returns (read from the
    # signed body or a signed header, or the body's SHA-256); false for event_id: :provider
    # with an id from a header no signature covers (GitHub, Shopify, :hmac's id_header
    # without {id}).
    def id_signed? = @id_signed

    # The native state (HMAC keys) is not copyable; build another Verifier instead.
    def initialize_copy(_other)
      raise TypeError, "#{self.class.name} cannot be copied; build another with Verifier.new"
    end

    def inspect
      "#<#{self.class.name} #{@scheme} secrets=#{secret_count} tolerance=#{@tolerance.inspect} " \
        "max_body_bytes=#{@max_body_bytes}>"
    end
    alias to_s inspect

    private

    # The PaypalCertificates to fetch from, or nil; @webhook_ids: the secrets' webhook ids.
    def certificate_source(option, secrets)
      if option && @scheme != :paypal
        raise ConfigurationError, "fetch_certificates applies to :paypal only"
      end
      unless option.nil? || option == false || option == true || option.is_a?(PaypalCertificates)
        raise ConfigurationError, "fetch_certificates must be true, false or a WebhookInbox::PaypalCertificates"
      end
      return nil unless @scheme == :paypal

      bare = secrets.index { |s| !s.include?(":") }
      if bare && !option
        raise ConfigurationError, "secret ##{bare + 1} is a bare webhook id: give fetch_certificates: true, " \
                                  "or WEBHOOK_ID:CERT_ID:<PEM certificate>"
      end
      @webhook_ids = secrets.map { |s| s.split(":", 2).first }.uniq.freeze
      @fetched = {}
      @fetched_lock = Mutex.new
      option == true ? PaypalCertificates.default : option || nil
    end

    # A Verifier (without fetching) for the certificate at url, built once per URL: its key is
    # parsed once, not per request. At most the store's max_entries are kept.
    def fetched_verifier(url)
      v = @fetched_lock.synchronize { @fetched[url] }
      return v if v

      cid = Verifier.paypal_cert_id(url.to_s) or
        raise VerificationError.new(:malformed_signature, "paypal-cert-url is not PayPal's certificate endpoint")
      pem = @certificates.leaf_pem(url).strip
      v = begin
        Verifier.new(:paypal, secrets: @webhook_ids.map { |id| "#{id}:#{cid}:#{pem}" }, tolerance: @tolerance,
                              max_body_bytes: @max_body_bytes, event_id: @event_id)
      rescue ConfigurationError # not an RSA key of 2048 bits or more: never a 500
        raise VerificationError.new(:certificate_unavailable, "the fetched PayPal certificate is not an RSA key of >= 2048 bits")
      end
      @fetched_lock.synchronize do
        @fetched.delete(@fetched.each_key.first) while @fetched.size >= @certificates.max_entries
        @fetched[url] ||= v
      end
    end

    # PAYPAL-CERT-URL as the native lookup finds it (Rack env, then any spelling).
    def cert_url(headers)
      %w[HTTP_PAYPAL_CERT_URL paypal-cert-url Paypal-Cert-Url PAYPAL-CERT-URL].each do |k|
        return headers[k].to_s if headers.key?(k)
      end
      headers.each { |k, v| return v.to_s if k.to_s.downcase.tr("_", "-").delete_prefix("http-") == "paypal-cert-url" }
      nil
    end

    def checked_public_url(url)
      return nil if url.nil?
      raise ConfigurationError, "public_url applies to providers that sign the URL" unless @signs_url
      unless url.is_a?(String) && url.match?(%r{\Ahttps?://[^/?#\s]+[^?#\s]*\z}i)
        raise ConfigurationError, "public_url must be an http(s) URL without query or fragment, as the provider calls it"
      end

      url.dup.freeze
    end

    # The URL the provider signed: public_url (or the Rack env's scheme, host and path) plus
    # the request's query string.
    def request_url(env)
      query = env["QUERY_STRING"].to_s
      query = "?#{query}" unless query.empty?
      return "#{@public_url}#{query}" if @public_url
      unless env.key?("REQUEST_METHOD")
        raise ConfigurationError, "#{@scheme} signs the URL it called: give public_url: or verify with a Rack env"
      end

      scheme = env["rack.url_scheme"] || "http"
      host = env["HTTP_HOST"] || begin
        port = env["SERVER_PORT"].to_s
        default = port.empty? || (scheme == "https" ? port == "443" : port == "80")
        default ? env["SERVER_NAME"].to_s : "#{env["SERVER_NAME"]}:#{port}"
      end
      "#{scheme}://#{host}#{env["SCRIPT_NAME"]}#{env["PATH_INFO"]}#{query}"
    end

    def header_name(name)
      name&.to_s&.downcase&.tr("_", "-")
    end
  end
end
require_relative "provider_table"
require_relative "paypal_certificates"
