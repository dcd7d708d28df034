import { SqlClient } from "@effect/sql"
import { Effect } from "effect"

/**
 * Tenants and what they own, as the admin and management APIs and the conversation core need it.
 * Constraints make impossible states unstorable; `(tenant_id, id)` keys let children prove that
 * their channel belongs to their tenant.
 */
export default Effect.gen(function*() {
  const sql = yield* SqlClient.SqlClient

  yield* sql`
    CREATE TABLE tenants (
      id uuid PRIMARY KEY,
      name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
      status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'inactive')),
      tier text NOT NULL DEFAULT 'default' CHECK (tier IN ('high', 'default', 'bulk')),
      retention_days integer NOT NULL DEFAULT 90 CHECK (retention_days BETWEEN 1 AND 36500),
      alert_webhook_url text,
      allowed_upload_types text[],
      limits jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(limits) = 'object'),
      inserted_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX tenants_name ON tenants (name, id)`

  yield* sql`
    CREATE TABLE api_keys (
      id uuid PRIMARY KEY,
      tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      kind text NOT NULL CHECK (kind IN ('primary', 'scoped')),
      name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
      prefix text NOT NULL,
      key_hash bytea NOT NULL UNIQUE,
      scopes text[] NOT NULL CHECK (cardinality(scopes) >= 1 AND scopes <@ ARRAY['read', 'write', 'manage']),
      expires_at timestamptz,
      last_used_at timestamptz,
      revoked_at timestamptz,
      created_by text,
      inserted_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX api_keys_tenant ON api_keys (tenant_id, inserted_at DESC, id DESC)`

  yield* sql`
    CREATE TABLE channels (
      id uuid PRIMARY KEY,
      tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
      type text NOT NULL CHECK (type ~ '^[a-z][a-z0-9_]{0,63}$'),
      mode text NOT NULL DEFAULT 'duplex' CHECK (mode IN ('inbound', 'outbound', 'duplex')),
      status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'inactive')),
      require_signature boolean NOT NULL DEFAULT true,
      config jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(config) = 'object'),
      transformations jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(transformations) = 'array'),
      retry_policy jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(retry_policy) = 'object'),
      rate_limit jsonb CHECK (rate_limit IS NULL OR jsonb_typeof(rate_limit) = 'object'),
      circuit_state text NOT NULL DEFAULT 'closed' CHECK (circuit_state IN ('closed', 'open', 'half_open', 'paused')),
      secret_hash bytea NOT NULL UNIQUE,
      inserted_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      UNIQUE (tenant_id, id)
    )`
  yield* sql`CREATE INDEX channels_tenant_name ON channels (tenant_id, name, id)`

  yield* sql`
    CREATE TABLE publishable_keys (
      id uuid PRIMARY KEY,
      tenant_id uuid NOT NULL,
      channel_id uuid NOT NULL,
      name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
      prefix text NOT NULL,
      key_hash bytea NOT NULL UNIQUE,
      allowed_origins text[] NOT NULL DEFAULT '{}',
      status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'disabled')),
      inserted_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      FOREIGN KEY (tenant_id, channel_id) REFERENCES channels (tenant_id, id) ON DELETE CASCADE
    )`
  yield* sql`CREATE INDEX publishable_keys_channel ON publishable_keys (channel_id, inserted_at)`

  yield* sql`
    CREATE TABLE portal_users (
      id uuid PRIMARY KEY,
      tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      email text NOT NULL CHECK (position('@' in email) > 1),
      name text,
      role text NOT NULL DEFAULT 'member' CHECK (role IN ('owner', 'admin', 'member', 'viewer')),
      status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'inactive')),
      password_hash text NOT NULL,
      totp_secret text,
      totp_enabled boolean NOT NULL DEFAULT false,
      inserted_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE UNIQUE INDEX portal_users_email ON portal_users (tenant_id, lower(email))`
  yield* sql`CREATE INDEX portal_users_tenant ON portal_users (tenant_id, inserted_at DESC, id DESC)`

  yield* sql`
    CREATE TABLE portal_sessions (
      id uuid PRIMARY KEY,
      user_id uuid NOT NULL REFERENCES portal_users (id) ON DELETE CASCADE,
      token_hash bytea NOT NULL UNIQUE,
      expires_at timestamptz NOT NULL,
      inserted_at timestamptz NOT NULL DEFAULT now()
    )`

  // The audit trail outlives what it describes, so it has no foreign keys.
  yield* sql`
    CREATE TABLE audit_log (
      id uuid PRIMARY KEY,
      tenant_id uuid,
      actor_type text NOT NULL CHECK (actor_type IN ('tenant_api', 'admin_api', 'system')),
      actor_id text NOT NULL,
      action text NOT NULL,
      resource_type text NOT NULL,
      resource_id text,
      changes jsonb,
      inserted_at timestamptz NOT NULL DEFAULT now()
    )`
  yield* sql`CREATE INDEX audit_log_tenant ON audit_log (tenant_id, inserted_at DESC)`

  yield* sql`
    CREATE TABLE participants (
      id uuid PRIMARY KEY,
      tenant_id uuid NOT NULL,
      channel_id uuid NOT NULL,
      external_id text NOT NULL,
      display_name text,
      metadata jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
      opted_out_at timestamptz,
      inserted_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      UNIQUE (channel_id, external_id),
      FOREIGN KEY (tenant_id, channel_id) REFERENCES channels (tenant_id, id) ON DELETE CASCADE
    )`

  yield* sql`
    CREATE TABLE conversations (
      id uuid PRIMARY KEY,
      tenant_id uuid NOT NULL,
      channel_id uuid NOT NULL,
      origin_channel_id uuid NOT NULL,
      participant_id uuid REFERENCES participants (id) ON DELETE SET NULL,
      status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'closed')),
      metadata jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
      head_seq bigint NOT NULL DEFAULT 0 CHECK (head_seq >= 0),
      closed_at timestamptz,
      inserted_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      UNIQUE (tenant_id, id),
      CHECK ((status = 'closed') = (closed_at IS NOT NULL)),
      FOREIGN KEY (tenant_id, channel_id) REFERENCES channels (tenant_id, id) ON DELETE CASCADE,
      FOREIGN KEY (tenant_id, origin_channel_id) REFERENCES channels (tenant_id, id) ON DELETE CASCADE
    )`
  yield* sql`CREATE INDEX conversations_tenant_list ON conversations (tenant_id, inserted_at DESC, id DESC)`
  yield* sql`CREATE INDEX conversations_channel_activity ON conversations (channel_id, updated_at DESC, id DESC)`
  yield* sql`CREATE INDEX conversations_idle ON conversations (updated_at) WHERE status = 'active'`
  yield* sql`CREATE INDEX conversations_participant ON conversations (participant_id) WHERE participant_id IS NOT NULL`

  yield* sql`
    CREATE TABLE conversation_channels (
      conversation_id uuid NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
      channel_id uuid NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
      role text NOT NULL CHECK (role IN ('origin', 'target', 'member')),
      participant_id uuid REFERENCES participants (id) ON DELETE SET NULL,
      inserted_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (conversation_id, channel_id)
    )`

  // Gap-free seq is enforced here, not in memory: two runners may briefly own one conversation.
  yield* sql`
    CREATE TABLE activities (
      conversation_id uuid NOT NULL REFERENCES conversations (id) ON DELETE CASCADE,
      seq bigint NOT NULL CHECK (seq >= 1),
      id uuid NOT NULL UNIQUE,
      tenant_id uuid NOT NULL,
      type text NOT NULL CHECK (type IN ('message', 'event', 'typing', 'messageReaction', 'messageUpdate',
        'messageDelete', 'conversationUpdate', 'endOfConversation')),
      sender text NOT NULL,
      text text,
      attachments jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(attachments) = 'array'),
      metadata jsonb NOT NULL DEFAULT '{}' CHECK (jsonb_typeof(metadata) = 'object'),
      idempotency_key text,
      reply_to_id uuid,
      message_type text,
      payload jsonb,
      source_channel_id uuid,
      edited_at timestamptz,
      deleted_at timestamptz,
      inserted_at timestamptz NOT NULL DEFAULT now(),
      PRIMARY KEY (conversation_id, seq),
      UNIQUE (conversation_id, idempotency_key),
      CHECK ((message_type IS NULL) = (payload IS NULL)),
      CHECK (message_type IS NULL OR type = 'message')
    )`

  yield* sql`
    CREATE TABLE deliveries (
      id uuid PRIMARY KEY,
      tenant_id uuid NOT NULL,
      activity_id uuid NOT NULL REFERENCES activities (id) ON DELETE CASCADE,
      conversation_id uuid NOT NULL,
      channel_id uuid NOT NULL REFERENCES channels (id) ON DELETE CASCADE,
      status text NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'sent', 'delivered', 'read', 'failed')),
      attempts integer NOT NULL DEFAULT 0 CHECK (attempts >= 0),
      last_error text,
      provider_message_id text,
      sent_at timestamptz,
      delivered_at timestamptz,
      read_at timestamptz,
      retry_count integer NOT NULL DEFAULT 0 CHECK (retry_count >= 0),
      retried_by text,
      retried_at timestamptz,
      next_attempt_at timestamptz,
      payload jsonb NOT NULL,
      inserted_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      UNIQUE (activity_id, channel_id)
    )`
  yield* sql`CREATE INDEX deliveries_due ON deliveries (channel_id, next_attempt_at) WHERE status = 'pending'`
  yield* sql`CREATE INDEX deliveries_tenant_list ON deliveries (tenant_id, inserted_at DESC, id DESC)`
  yield* sql`
    CREATE UNIQUE INDEX deliveries_provider_message ON deliveries (channel_id, provider_message_id)
    WHERE provider_message_id IS NOT NULL`

  yield* sql`
    CREATE TABLE routing_rules (
      id uuid PRIMARY KEY,
      tenant_id uuid NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
      name text NOT NULL CHECK (length(name) BETWEEN 1 AND 200),
      source_channel_id uuid NOT NULL,
      target_channel_ids uuid[] NOT NULL CHECK (cardinality(target_channel_ids) BETWEEN 1 AND 20),
      enabled boolean NOT NULL DEFAULT true,
      conditions jsonb NOT NULL DEFAULT '{}',
      transformations jsonb NOT NULL DEFAULT '[]' CHECK (jsonb_typeof(transformations) = 'array'),
      priority integer NOT NULL DEFAULT 100 CHECK (priority BETWEEN -1000000 AND 1000000),
      stop_processing boolean NOT NULL DEFAULT false,
      inserted_at timestamptz NOT NULL DEFAULT now(),
      updated_at timestamptz NOT NULL DEFAULT now(),
      UNIQUE (tenant_id, name),
      CHECK (NOT (source_channel_id = ANY (target_channel_ids))),
      FOREIGN KEY (tenant_id, source_channel_id) REFERENCES channels (tenant_id, id) ON DELETE CASCADE
    )`

  // Node-wide secrets generated once (the token signing key when TOKEN_SIGNING_KEY is unset).
  yield* sql`
    CREATE TABLE installation_secrets (
      name text PRIMARY KEY,
      value text NOT NULL,
      inserted_at timestamptz NOT NULL DEFAULT now()
    )`
})
