# frozen_string_literal: true

require "pg"
require "webhook_inbox/schema"
require_relative "../sidecar/sidecar_helper"

# Issue 29 item 1, the SQL layer's 1.0 layout (db/README.md): tables in numbered files, every
# function in one current definition under db/functions/, applied by every migrate; a database
# at v20 upgrades in place to exactly the functions and tables a fresh one gets, through the
# Rails loader and through `webhook-inbox-sidecar migrate`.
RSpec.describe "the schema's layout (db/)", :sidecar do
  db_dir = WebhookInbox::Schema::DIR
  create = /^CREATE (?:OR REPLACE )?FUNCTION ([a-z_.]+)\(/

  # [name/input argument count, where] of every CREATE FUNCTION in the files (counted at the
  # top level of the parentheses: the overloads the core keeps differ in their count).
  define_method(:definitions) do |files|
    files.flat_map do |f|
      text = File.read(f)
      text.to_enum(:scan, create).map do
        name = Regexp.last_match(1)
        rest = text[Regexp.last_match.end(0)..]
        depth = 1
        args = rest.each_char.take_while { |c| (depth += { "(" => 1, ")" => -1 }.fetch(c, 0)).positive? }.join
        inputs = args.gsub(/--[^\n]*/, "").gsub(/\([^()]*\)/, "").split(",").map(&:strip)
        count = inputs.count { |a| !a.empty? && !a.match?(/\AOUT\s/i) } # OUT parameters are no part of the signature
        ["#{name}/#{count}", File.basename(f)]
      end
    end
  end

  let(:core) { definitions(WebhookInbox::Schema::FUNCTION_FILES) }

  it "defines no function in the numbered files (tables, indexes and constraints only)" do
    expect(definitions(WebhookInbox::Schema::FILES)).to eq([])
  end

  it "defines each function once under db/functions/" do
    twice = core.group_by(&:first).select { |_, defs| defs.size > 1 }
    expect(twice).to eq({})
  end

  # db/citus/ holds only the layout and Citus-only helpers, never a copy of a core body: each
  # core function is written once, in a form Citus runs as it is (issue 29).
  it "defines no core function in db/citus/" do
    core_names = core.map { |key, _| key.split("/").first }.uniq
    copies = definitions(Dir[File.join(db_dir, "citus", "*.sql")]).select { |key, _| core_names.include?(key.split("/").first) }
    expect(copies).to eq([])
  end

  it "says one version: the function, WebhookInbox::Schema::VERSION and the sidecar's WI_SCHEMA_VERSION" do
    header = File.read(File.expand_path("../../sidecar/src/pg/schema.h", __dir__))
    expect(Integer(header[/#define WI_SCHEMA_VERSION (\d+)/, 1])).to eq(WebhookInbox::Schema::VERSION)
    expect(WebhookInbox::Schema::VERSION).to be >= File.basename(WebhookInbox::Schema::FILES.last).to_i
  end

  it "takes the sidecar's migrate lock in the Rails loader (one key)" do
    header = File.read(File.expand_path("../../sidecar/src/admin/migrate.h", __dir__))
    expect(WebhookInbox::Schema::LOCK_SQL).to include("(#{header[/#define WI_MIGRATE_LOCK_KEY "(\d+)"/, 1]})")
  end

  describe "on PostgreSQL" do
    let(:cluster) { TestDatabase.cluster }

    def database(label)
      name = "layout_#{label}_#{SecureRandom.hex(4)}"
      cluster.psql("CREATE DATABASE #{name}", db: "postgres")
      name
    end

    # What the schema holds, object by object: functions with their definitions and comments,
    # and every table's columns, constraints, indexes and triggers.
    def objects(db)
      conn = PG.connect(cluster.url(db))
      functions = conn.exec(<<~SQL).values
        SELECT p.oid::regprocedure::text, pg_get_functiondef(p.oid), obj_description(p.oid, 'pg_proc')
          FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace ORDER BY 1
      SQL
      tables = conn.exec(<<~SQL).values
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid), col_description(c.oid, a.attnum)
          FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
          LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
         WHERE c.relnamespace = 'public'::regnamespace AND c.relkind = 'r' ORDER BY 1, 2
      SQL
      rest = conn.exec(<<~SQL).values
        SELECT 'constraint', conname, pg_get_constraintdef(oid) FROM pg_constraint WHERE connamespace = 'public'::regnamespace
        UNION ALL SELECT 'index', indexname, indexdef FROM pg_indexes WHERE schemaname = 'public'
        UNION ALL SELECT 'trigger', tgname, pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal
        UNION ALL SELECT 'comment', c.relname, obj_description(c.oid, 'pg_class') FROM pg_class c
                   WHERE c.relnamespace = 'public'::regnamespace
        ORDER BY 1, 2, 3
      SQL
      { functions: functions, tables: tables, rest: rest }
    ensure
      conn&.close
    end

    def load(db, after: 0)
      WebhookInbox::Schema.statements(after: after).each { |_name, sql| cluster.psql(sql, db: db) }
    end

    let(:v20) { File.expand_path("../fixtures/schema_v20.sql", __dir__) }
    let(:fresh) do
      db = database("fresh")
      load(db)
      objects(db)
    end

    it "builds VERSION on an empty database, every SQL body valid when checked" do
      db = database("checked")
      load(db)
      expect(cluster.psql("SELECT webhook_inbox_schema_version()", db: db).strip).to eq(WebhookInbox::Schema::VERSION.to_s)
      # Again with the bodies checked (every function exists now): a wrong SQL body fails here.
      WebhookInbox::Schema.functions.each do |_name, sql|
        cluster.psql(sql.sub("SET LOCAL check_function_bodies = off;", ""), db: db)
      end
      expect(objects(db)).to eq(fresh)
    end

    it "upgrades a v20 database in place to what a fresh one holds (Rails loader's statements)" do
      db = database("v20_rails")
      cluster.psql_file(v20, db: db)
      expect(cluster.psql("SELECT webhook_inbox_schema_version()", db: db).strip).to eq("20")
      load(db, after: 20)
      expect(objects(db)).to eq(fresh)
    end

    it "upgrades a v20 database in place to what a fresh one holds (`webhook-inbox-sidecar migrate`)" do
      db = database("v20_sidecar")
      cluster.psql_file(v20, db: db)
      status, out, err = sidecar("migrate", "--database-url", cluster.url(db))
      expect(status.exitstatus).to eq(0), err
      expect(out).to eq("inbox schema v#{WebhookInbox::Schema::VERSION}: applied 022_worker_heartbeats.sql .. " \
                      "#{File.basename(WebhookInbox::Schema::FILES.last)} and db/functions/\n")
      expect(objects(db)).to eq(fresh)
    end
  end
end
