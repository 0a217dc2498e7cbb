# frozen_string_literal: true

# extconf.rb - finds OpenSSL (libcrypto) and libpq, then writes the extension's Makefile.
require "mkmf"

def missing(what, debian, other)
  abort <<~MSG
    webhook_inbox: #{what} was not found.
      Debian/Ubuntu: sudo apt-get install #{debian}
      Fedora/RHEL:   sudo dnf install #{other}
      macOS:         brew install openssl@3 libpq  (then: gem install webhook_inbox -- --with-pg-config=$(brew --prefix libpq)/bin/pg_config)
  MSG
end

dir_config("openssl")
unless pkg_config("libcrypto") || (have_header("openssl/hmac.h") && have_library("crypto", "HMAC"))
  missing("OpenSSL (libcrypto headers)", "libssl-dev", "openssl-devel")
end

pg_config = with_config("pg-config") || find_executable("pg_config")
if pg_config
  inc = `"#{pg_config}" --includedir`.strip
  lib = `"#{pg_config}" --libdir`.strip
  $INCFLAGS << " -I#{inc}" unless inc.empty?
  $LDFLAGS << " -L#{lib}" unless lib.empty?
end
pkg_config("libpq")
have_header("libpq-fe.h") && have_library("pq", "PQconnectdb") or
  missing("libpq (PostgreSQL client library and headers)", "libpq-dev", "libpq-devel")

# sig_paypal.c: PayPal signs the body's CRC-32 (zlib's crc32_z; libruby links zlib too).
(pkg_config("zlib") || (have_header("zlib.h") && have_library("z", "crc32_z"))) or
  missing("zlib (headers)", "zlib1g-dev", "zlib-devel")

# num.c builds its power-of-five table once per process under pthread_once.
have_header("pthread.h") or missing("pthread.h (POSIX threads)", "libc6-dev", "glibc-devel")

$CFLAGS << " -std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Wno-unused-parameter -fvisibility=hidden"
create_makefile("webhook_inbox/webhook_inbox")
