# frozen_string_literal: true

# PaypalCertServer - a local HTTPS server standing in for PayPal's certificate endpoint, with
# a test CA made at start (nothing private is committed): its TLS certificate names
# api.paypal.com and api-m.paypal.com, so a PaypalCertificates given ca_file: and
# connect_to: reaches it with the host name check on. Routes are path => [status, body,
# headers, delay seconds]; #paths lists the paths asked, in order.
require "openssl"
require "socket"
require "tempfile"

class PaypalCertServer
  Chain = Struct.new(:key, :leaf, :intermediate, :intermediate_key) do
    def pem = [leaf, intermediate].compact.map(&:to_pem).join
  end

  attr_reader :port, :ca_file, :routes

  def initialize
    @ca_key = OpenSSL::PKey::EC.generate("prime256v1")
    @ca = PaypalCertServer.cert(@ca_key, "/CN=webhook_inbox test root", @ca_key, nil, ca: true)
    @ca_temp = Tempfile.new(["paypal-test-ca", ".pem"]).tap { |f| f.write(@ca.to_pem) && f.flush }
    @ca_file = @ca_temp.path
    tls_key = OpenSSL::PKey::EC.generate("prime256v1")
    tls = PaypalCertServer.cert(tls_key, "/CN=api.paypal.com", @ca_key, @ca, san: "DNS:api.paypal.com,DNS:api-m.paypal.com")
    ctx = OpenSSL::SSL::SSLContext.new
    ctx.cert = tls
    ctx.key = tls_key
    @tcp = TCPServer.new("127.0.0.1", 0)
    @port = @tcp.addr[1]
    @ssl = OpenSSL::SSL::SSLServer.new(@tcp, ctx)
    @ssl.start_immediately = true
    @routes = {}
    @paths = []
    @lock = Mutex.new
    @thread = Thread.new { serve }
  end

  # connect_to: for PaypalCertificates.new.
  def connect_to = { "api.paypal.com" => ["127.0.0.1", @port], "api-m.paypal.com" => ["127.0.0.1", @port] }

  def paths = @lock.synchronize { @paths.dup }

  # A PayPal signing chain: an RSA leaf (subject cn) issued by an intermediate of the test CA
  # (or self-signed with self_signed: true), valid now.
  def chain(cn: "messageverificationcerts.paypal.com", self_signed: false)
    key = OpenSSL::PKey::RSA.new(2048)
    return Chain.new(key, PaypalCertServer.cert(key, "/CN=#{cn}", key, nil)) if self_signed

    ikey = OpenSSL::PKey::EC.generate("prime256v1")
    inter = PaypalCertServer.cert(ikey, "/CN=webhook_inbox test intermediate", @ca_key, @ca, ca: true)
    Chain.new(key, PaypalCertServer.cert(key, "/O=PayPal, Inc./CN=#{cn}", ikey, inter), inter, ikey)
  end

  def stop
    @thread.kill
    @ssl.close
    @ca_temp.close!
  end

  def self.cert(key, subject, issuer_key, issuer, ca: false, san: nil)
    c = OpenSSL::X509::Certificate.new
    c.version = 2
    c.serial = rand(1 << 60)
    c.subject = OpenSSL::X509::Name.parse(subject)
    c.issuer = issuer ? issuer.subject : c.subject
    c.public_key = key.is_a?(OpenSSL::PKey::EC) ? OpenSSL::PKey.read(key.public_to_der) : key.public_key
    c.not_before = Time.now - 3600
    c.not_after = Time.now + 86_400
    ef = OpenSSL::X509::ExtensionFactory.new(c, issuer || c)
    c.add_extension(ef.create_extension("basicConstraints", ca ? "CA:TRUE" : "CA:FALSE", true))
    c.add_extension(ef.create_extension("keyUsage", ca ? "keyCertSign,cRLSign" : "digitalSignature,keyEncipherment", true))
    c.add_extension(ef.create_extension("subjectAltName", san)) if san
    c.sign(issuer_key, OpenSSL::Digest.new("SHA256"))
  end

  private

  def serve
    loop do
      conn = begin
        @ssl.accept
      rescue OpenSSL::SSL::SSLError, SystemCallError, IOError
        next # a client that refused our certificate
      end
      Thread.new(conn) { |c| answer(c) }
    end
  end

  def answer(conn)
    path = conn.gets.to_s.split(" ")[1].to_s
    nil while (line = conn.gets) && line != "\r\n"
    @lock.synchronize { @paths << path }
    status, body, headers, delay = @routes.fetch(path, [404, "not found"])
    sleep delay if delay
    head = { "Content-Type" => "application/x-pem-file", "Content-Length" => body.bytesize.to_s, "Connection" => "close" }
    conn.write("HTTP/1.1 #{status} X\r\n#{head.merge(headers || {}).map { |k, v| "#{k}: #{v}\r\n" }.join}\r\n#{body}")
  rescue OpenSSL::SSL::SSLError, SystemCallError, IOError
    nil
  ensure
    conn.close rescue nil # rubocop:disable Style/RescueModifier
  end
end
