# frozen_string_literal: true

require "net/http"
require "openssl"
require "uri"

module WebhookInbox
  # PaypalCertificates - PayPal's webhook signing certificates, fetched from a delivery's
  # PAYPAL-CERT-URL when a :paypal Verifier has fetch_certificates: on and no configured
  # secret names that certificate. Per process, shared by every Verifier that uses it.
  #
  # Fetched only from a URL on PayPal's certificate endpoint (Verifier.paypal_cert_id, the
  # native allowlist the signature check itself uses: https, api[-m][.sandbox].paypal.com,
  # /v1/notifications/certs/<id>, no port, userinfo or query), over TLS verified against the
  # trust store, no redirect followed, at most MAX_BYTES, with short timeouts. The answer must
  # be a PEM chain whose first certificate (the leaf) chains to the trust store (the system's,
  # or ca_file:) through the others, is valid now, and is PayPal's message-verification
  # certificate (subject CN messageverificationcerts[.sandbox].paypal.com, as PayPal's Java
  # SDK checks). Only the leaf's PEM is kept.
  #
  # Cached by URL: at most max_entries (least recently used go first); a URL is fetched by
  # one thread at a time (the others wait for its answer); a failure is remembered for
  # FAILURE_TTL seconds by certificate id (any of PayPal's hosts), so a flood of deliveries
  # naming one bad certificate costs one request. First-time fetches are bounded across all
  # certificate ids: at most max_fetching at once and fetch_burst, then one per 1/fetch_rate
  # seconds; beyond that a delivery is answered :certificate_unavailable at once (503: PayPal
  # retries), never queued behind an outbound connection. The Verifier fetches only for a
  # delivery whose headers, certificate URL and transmission time already passed.
  # #leaf_pem raises VerificationError: :unknown_key when PayPal answers 404 (no such
  # certificate), :certificate_unavailable for anything else (network, TLS, an answer that is
  # not a trusted PayPal chain): the Receiver answers that 503, so PayPal retries.
  #
  # connect_to: { "api.paypal.com" => ["127.0.0.1", port] } connects to another address while
  # TLS still checks the URL's host name: for tests only (a local HTTPS server with a test CA
  # given as ca_file:). It is settable only here, in code; never from a request or the
  # environment.
  class PaypalCertificates
    MAX_BYTES = 64 * 1024
    MAX_CERTS = 8
    MAX_ENTRIES = 64
    TIMEOUT = 5 # seconds, each of connect, TLS handshake, read
    FAILURE_TTL = 30
    MAX_FETCHING = 2    # first-time fetches in flight at once, all certificate ids together
    FETCH_BURST = 4     # first-time fetches allowed back to back
    FETCH_RATE = 0.1    # first-time fetches per second after the burst (one per 10 s)
    LEAF_CN = /\Amessageverificationcerts(\.sandbox)?\.paypal\.com\z/.freeze
    PEM_CERT = /-----BEGIN CERTIFICATE-----\r?\n.+?\r?\n-----END CERTIFICATE-----/m.freeze

    Entry = Struct.new(:state, :pem, :reason, :message, :until) # state: :loading, :ok, :failed

    # The process-wide store fetch_certificates: true uses (system trust store).
    def self.default
      DEFAULT_LOCK.synchronize { @default ||= new }
    end
    DEFAULT_LOCK = Mutex.new

    attr_reader :max_entries

    def initialize(ca_file: nil, max_entries: MAX_ENTRIES, timeout: TIMEOUT, connect_to: nil, max_fetching: MAX_FETCHING,
                   fetch_burst: FETCH_BURST, fetch_rate: FETCH_RATE)
      raise ConfigurationError, "ca_file: #{ca_file.inspect} is not a readable file" if ca_file && !File.readable?(ca_file)
      unless max_entries.is_a?(Integer) && max_entries.positive?
        raise ConfigurationError, "max_entries must be a positive Integer"
      end

      unless [max_fetching, fetch_burst].all? { |n| n.is_a?(Integer) && n.positive? } && fetch_rate.is_a?(Numeric) && fetch_rate.positive?
        raise ConfigurationError, "max_fetching and fetch_burst must be positive Integers, fetch_rate a positive number"
      end

      @trust = OpenSSL::X509::Store.new
      ca_file ? @trust.add_file(ca_file) : @trust.set_default_paths
      @max_entries = max_entries
      @timeout = timeout
      @connect_to = connect_to&.to_h { |host, (addr, port)| [host.to_s, [addr.to_s, Integer(port)]] }.freeze
      @entries = {}
      @failed_ids = {} # certificate id => its :failed Entry, while it lasts
      @max_fetching = max_fetching
      @fetch_burst = fetch_burst
      @fetch_rate = fetch_rate.to_f
      @tokens = fetch_burst.to_f
      @tokens_at = now
      @lock = Mutex.new
      @done = ConditionVariable.new
      @fetches = 0
    end

    # Requests made (not cache hits): for specs and the curious.
    def fetches = @lock.synchronize { @fetches }

    # URLs cached (fetched, failed or being fetched).
    def size = @lock.synchronize { @entries.size }

    # The verified leaf certificate (PEM) at url, fetched at most once per url while cached.
    # Raises VerificationError (:malformed_signature for a URL off PayPal's endpoint, which is
    # never fetched; :unknown_key; :certificate_unavailable).
    def leaf_pem(url)
      raise VerificationError.new(:malformed_signature, "paypal-cert-url is not PayPal's certificate endpoint") unless
        url.is_a?(String) && Verifier.paypal_cert_id(url)

      entry = claim(url)
      entry = fetch_into(url, entry) if entry.state == :loading # claimed by this thread
      raise VerificationError.new(entry.reason, entry.message) if entry.state == :failed

      entry.pem
    end

    def inspect = "#<#{self.class.name} entries=#{size}/#{@max_entries}>"

    private

    # The url's entry once no other thread is fetching it, or a new :loading one when this
    # thread is to fetch it (the others wait for it to settle); the id's remembered failure
    # first. Raises :certificate_unavailable when a new fetch is over the bounds.
    def claim(url)
      id = Verifier.paypal_cert_id(url)
      @lock.synchronize do
        loop do
          failed = @failed_ids[id]
          return failed if failed && failed.until >= now

          e = @entries[url]
          if e.nil? || (e.state == :failed && e.until < now)
            admit_fetch!
            @entries.delete(url)
            evict
            return @entries[url] = Entry.new(:loading)
          end
          return touch(url, e) unless e.state == :loading

          @done.wait(@lock, 3 * @timeout + 1)
        end
      end
    end

    # A new fetch within max_fetching and the token bucket (fetch_burst, fetch_rate), or
    # VerificationError :certificate_unavailable. Callers hold @lock.
    def admit_fetch!
      t = now
      @tokens = [@tokens + (t - @tokens_at) * @fetch_rate, @fetch_burst.to_f].min
      @tokens_at = t
      if @entries.each_value.count { |e| e.state == :loading } >= @max_fetching
        unavailable("#{@max_fetching} certificate fetches are in flight already; try again later")
      end
      unavailable("certificate fetches are rate limited (#{@fetch_burst}, then #{@fetch_rate}/s); try again later") if @tokens < 1

      @tokens -= 1
    end

    def fetch_into(url, entry)
      result = begin
        Entry.new(:ok, fetch(url).freeze)
      rescue VerificationError => e
        Entry.new(:failed, nil, e.reason, e.message, now + FAILURE_TTL)
      rescue StandardError => e # a bug here must still answer 503, never a 500 or a 200
        Entry.new(:failed, nil, :certificate_unavailable, "paypal certificate fetch failed (#{e.class})", now + FAILURE_TTL)
      end
    ensure # a thread killed mid-fetch must not leave the others waiting on it
      result = settle(url, entry, result || Entry.new(:failed, nil, :certificate_unavailable, "paypal certificate fetch " \
                                                      "interrupted", now + FAILURE_TTL))
    end

    def settle(url, mine, result)
      @lock.synchronize do
        @entries[url] = result if @entries[url].equal?(mine)
        remember_failure(Verifier.paypal_cert_id(url), result) if result.state == :failed
        @done.broadcast
      end
      result
    end

    # The id's failure, for every URL naming it, until it expires (at most max_entries ids,
    # the expired and then the oldest dropped first). Callers hold @lock.
    def remember_failure(id, entry)
      t = now
      @failed_ids.delete_if { |_, e| e.until < t }
      @failed_ids.delete(@failed_ids.each_key.first) while @failed_ids.size >= @max_entries
      @failed_ids[id] = entry
    end

    def touch(url, entry)
      @entries[url] = @entries.delete(url) # most recently used last
      entry
    end

    # Drops the least recently used settled entries until one more fits.
    def evict
      @entries.each_key.reject { |u| @entries[u].state == :loading }
              .first([@entries.size - @max_entries + 1, 0].max).each { |u| @entries.delete(u) }
    end

    def now = Process.clock_gettime(Process::CLOCK_MONOTONIC)

    def unavailable(why)
      raise VerificationError.new(:certificate_unavailable, "paypal certificate unavailable: #{why}")
    end

    # GET url: its body's verified leaf PEM.
    def fetch(url)
      @lock.synchronize { @fetches += 1 }
      verified_leaf(get(URI(url)))
    end

    def get(uri)
      addr, port = @connect_to&.fetch(uri.host, nil)
      http = Net::HTTP.new(uri.host, port || uri.port, @connect_to ? nil : :ENV) # a test server: no proxy
      http.ipaddr = addr if addr
      http.use_ssl = true
      http.verify_mode = OpenSSL::SSL::VERIFY_PEER
      http.cert_store = @trust
      http.open_timeout = http.ssl_timeout = http.read_timeout = http.write_timeout = @timeout
      http.max_retries = 0
      body = +""
      http.start do
        http.request(Net::HTTP::Get.new(uri.request_uri, "Accept" => "application/x-pem-file, */*")) do |res|
          code = res.code.to_i
          raise VerificationError.new(:unknown_key, "PayPal has no certificate at paypal-cert-url (#{code})") if [404, 410].include?(code)
          unavailable("PayPal answered #{code} (no redirect is followed)") unless code == 200
          unavailable("declared over #{MAX_BYTES} bytes") if res.content_length.to_i > MAX_BYTES
          res.read_body do |chunk|
            body << chunk
            unavailable("over #{MAX_BYTES} bytes") if body.bytesize > MAX_BYTES
          end
        end
      end
      body
    rescue OpenSSL::SSL::SSLError => e
      unavailable("TLS: #{e.message[0, 200]}")
    rescue Timeout::Error, SocketError, SystemCallError, IOError, EOFError, Net::HTTPBadResponse => e
      unavailable(e.class.name)
    end

    def verified_leaf(body)
      pems = body.scan(PEM_CERT)
      unavailable("the answer is not a PEM certificate chain") if pems.empty? || pems.size > MAX_CERTS
      leaf, *chain = pems.map { |p| OpenSSL::X509::Certificate.new(p) }
      ctx = OpenSSL::X509::StoreContext.new(@trust, leaf, chain)
      unavailable("the chain is not trusted (#{ctx.error_string})") unless ctx.verify
      cn = leaf.subject.to_a.select { |name, _, _| name == "CN" }.map { |_, v, _| v }
      unavailable("the certificate is not PayPal's message verification certificate") unless cn.size == 1 && cn[0].match?(LEAF_CN)
      leaf.to_pem
    rescue OpenSSL::X509::CertificateError
      unavailable("the answer is not a PEM certificate chain")
    end
  end
end
