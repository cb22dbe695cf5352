// The client's public shapes. KV and timer answers are typed exactly as the cell's routes answer them;
// the log's (messages, push and ack answers) are the client's own, translated from the wire in
// wire.ts, and follow Queen's JavaScript client (`data` on a message, `success` on an answer).

/** A version token: unique and opaque, compared for equality only; a bigint past 2^53. */
export type Version = number | bigint;

/** Why a KV write did not apply: the cell's closed taxonomy. */
export type KvReason = 'exists' | 'absent' | 'version' | 'limit' | 'type';

/** Why an ack did not apply. */
export type AckReason = 'not_found' | 'already_acked' | 'lease_expired' | 'not_leased' | (string & {});

// ----------------------------------------------------------------------------------------- the log

/**
 * A popped message. `data` is what was pushed, typed by the caller (`pop<Order>()`, a handler's
 * `Message<Order>`), `unknown` when not said; ack, renew and transactions read the ids.
 */
export interface Message<T = unknown> {
  transactionId: string;
  partitionId: string;
  queue: string;
  partition: string;
  data: T;
  leaseId: string;
  leaseExpiresAt?: string;
  consumerGroup: string;
  createdAt: string;
  /** Failed deliveries so far, for this consumer group. */
  retryCount?: number;
  /**
   * The trace the message was pushed in (or its timer scheduled in), as a UUID: the producer's
   * Queen `traceId`, else the trace of the request that pushed it; null without one.
   */
  traceId?: string | null;
  /**
   * The W3C trace context of the request that pushed it (or scheduled its timer), when the cell
   * traced that request; consume() continues it in the handler's span. null otherwise.
   */
  traceparent?: string | null;
  [field: string]: unknown;
}

/**
 * One item to push: `{ data }` (Queen's spelling), `{ payload }`, or any other object, which is
 * pushed whole. `transactionId` is the item's idempotency key within its partition; the client
 * mints one (a UUID) when it is absent, so a retried push can never store it twice. `traceId`
 * (Queen's: UUID text) is stored on the message and answered by every pop; without one, the
 * message carries the active span's trace when the cell traces (see `tracing` in the options).
 */
export type PushItem<T = unknown> =
  | { data: T; transactionId?: string; traceId?: string; [field: string]: unknown }
  | { payload: T; transactionId?: string; traceId?: string; [field: string]: unknown }
  | Record<string, unknown>;

export interface PushResult {
  transactionId: string;
  partitionId: string;
  queue: string;
  partition: string;
  /** `duplicate`: that transactionId was already in the partition; nothing was stored. */
  status: 'queued' | 'duplicate';
  /** The stored message's id (a duplicate's: the winner's), on a cell that answers it. */
  messageId?: string;
}

/** `true` / `'completed'` moves the group's cursor past it; `false` / `'failed'` asks for a redelivery. */
export type AckStatus = boolean | 'completed' | 'failed';

export interface AckContext {
  /** The consumer group; defaults to the group the message was popped for. */
  group?: string;
  /** Queen's transaction builder spells the group this way; accepted as the same thing. */
  consumerGroup?: string;
}

export interface AckResult {
  success: boolean;
  transactionId: string;
  partitionId: string;
  consumerGroup: string;
  status: 'completed' | 'failed';
  /** Why it did not apply, when `success` is false. */
  ackReason?: AckReason;
  /** A `failed` ack past the queue's retryLimit set the message aside for this group. */
  deadLetter?: boolean;
}

export interface AckBatchResult {
  /** True only when every ack applied. */
  success: boolean;
  results: AckResult[];
}

export interface RenewResult {
  leaseId: string;
  success: boolean;
  /** The lease's new expiry, when renewed. */
  expiresAt?: string;
  /** `lease_expired`: the lease was gone (expired or released); it is never revived. */
  reason?: string;
}

export interface QueueOptions {
  /** Seconds a pop's lease lasts (1 to 86400; the cell's default 300). */
  leaseTime?: number;
  /** Failed deliveries allowed before a message is set aside (0 to 1000; default 3). */
  retryLimit?: number;
  /** Seconds a message waits before it is delivered (0 to 86400). */
  delayedProcessing?: number;
  /** Seconds a partition must be quiet before it is leased (0 to 86400). */
  windowBuffer?: number;
  /** Milliseconds a group waits before a message it acked `failed` comes back (1000 unless set, as Queen MQ; 0: at once). */
  retryDelay?: number;
  /** Above retryDelay: the delay doubles with each failure of a message, up to this (ms). */
  retryDelayMax?: number;
  /** Most unconsumed messages (0: no cap); past it a push is refused, 429 log_queue_full. */
  maxSize?: number;
  /** The order of a pop by namespace/task, higher first. */
  priority?: number;
  /** Payloads stored encrypted (the cell needs QUEEN_ENCRYPTION_KEY). */
  encryptionEnabled?: boolean;
}

/** A message set aside after its queue's retryLimit, for one consumer group (GET /api/v1/dlq). */
export interface DeadLetter<T = any> {
  id: string;
  transactionId: string;
  partitionId: string;
  queue: string;
  partition: string;
  consumerGroup: string;
  /** The `error` of the last failed ack; null when none gave one (expired leases). */
  errorMessage: string | null;
  retryCount: number;
  data: T;
  createdAt: string;
  failedAt: string;
  [field: string]: unknown;
}

export interface DeadLetterPage<T = any> {
  messages: DeadLetter<T>[];
  /** How many match, beyond this page. */
  total: number;
}

export interface DeadLetterQuery {
  /** One consumer group's dead letters (default: every group's). */
  group?: string;
  partition?: string;
  /** 1 to 1000 (default 100). */
  limit?: number;
  offset?: number;
  /** Set aside at or after / at or before this instant. */
  from?: Date | string;
  to?: Date | string;
}

export interface DeleteQueueResult {
  queue: string;
  /** Whether there was a queue to delete. */
  existed: boolean;
}

export interface DeleteGroupResult {
  consumerGroup: string;
  /** The (partition, group) cursors removed. */
  deletedPartitions: number;
}

export interface ConfigureResult {
  queue: string;
  options: Required<QueueOptions>;
}

// ------------------------------------------------------------------------------------------- KV

/** Exactly one of the two, on every write that can create a key (the cell refuses zero or two). */
export type Expiry = { ttlSeconds: number; forever?: undefined } | { forever: true; ttlSeconds?: undefined };

/** A get that found its key: `value` is there (`null` is a stored value, distinct from `found: false`). */
export interface KvGetFound<T = unknown> {
  index: number;
  op: 'get';
  key: string;
  found: true;
  value: T;
  version: Version;
  expiresAt: string | null;
  updatedAt: string;
}

/** A get of a key that is absent (or expired): nothing but the key. */
export interface KvGetMissing {
  index: number;
  op: 'get';
  key: string;
  found: false;
  value?: undefined;
  version?: undefined;
  expiresAt?: undefined;
  updatedAt?: undefined;
}

/** `if (r.found)` narrows to KvGetFound: `r.value` is a `T` there, and absent otherwise. */
export type KvGetResult<T = unknown> = KvGetFound<T> | KvGetMissing;

export interface KvRow<T = unknown> {
  key: string;
  value: T;
  version: Version;
  expiresAt: string | null;
  updatedAt: string;
}

export interface KvGetManyResult<T = unknown> {
  index: number;
  op: 'getMany';
  /** Live keys, in byte order. */
  rows: KvRow<T>[];
  /** The asked keys that are absent (or expired). */
  missing: string[];
}

export interface KvPrefixPage<T = unknown> {
  index: number;
  op: 'getPrefix';
  rows: KvRow<T>[];
  truncated: boolean;
  /** The cursor for the next page (the last key returned) when truncated, else null. */
  nextAfter: string | null;
}

/** Every write answers this, applied or not: the loser of a race gets the current value and version. */
export interface KvWriteResult<T = unknown> {
  index: number;
  op: 'put' | 'putIfAbsent' | 'delete' | 'incr';
  key: string;
  applied: boolean;
  /** Only when not applied. */
  reason?: KvReason;
  /** A live row is there now. */
  found: boolean;
  value?: T | null;
  /** The current version; 0 when absent. */
  version: Version;
  expiresAt?: string | null;
  updatedAt?: string | null;
  /**
   * Set when a `required` operation lost: the cell rolled the call back and answered with the
   * kv_precondition verdict, rendered here as this write's answer.
   */
  precondition?: true;
}

/** `once`'s answer: a putIfAbsent's, plus `won` (did this call write the marker). */
export interface KvOnceResult<T = unknown> extends KvWriteResult<T> {
  won: boolean;
}

export type KvResult = KvGetResult | KvGetManyResult | KvPrefixPage | KvWriteResult | KvOnceResult;

/** A `required` operation lost its precondition: nothing in the call (or bundle) committed. */
export interface KvPreconditionVerdict<T = unknown> {
  success: false;
  reason: 'kv_precondition';
  /** In the flat results array of the call (for a bundle: operations, then kv, then timers). */
  failedIndex: number;
  kvReason: KvReason;
  /** The winner's: the current value and version of the key. */
  value: T | null;
  version: Version;
}

export type KvBatchAnswer = { success: true; results: KvResult[] } | KvPreconditionVerdict;

// ----------------------------------------------------------------------------------------- timers

export interface TimerSchedule<T = unknown> {
  queue: string;
  partition?: string;
  /** What the fired message carries (`data` is accepted as the same thing). */
  payload?: T;
  data?: T;
  /** When it fires: a floor, never early. Exactly one of deliverAt and delaySeconds. */
  deliverAt?: Date | string;
  delaySeconds?: number;
  /** Makes the schedule idempotent: the same key answers the existing timer, created: false. */
  timerKey?: string;
}

export interface TimerWhen {
  deliverAt?: Date | string;
  delaySeconds?: number;
}

export interface Timer<T = unknown> {
  timerId: string;
  queue: string;
  partition: string;
  deliverAt: string;
  payload: T;
  createdAt: string;
  timerKey?: string;
  /** The timer is stored sealed (its queue has encryptionEnabled); `payload` is opened by the cell. */
  sealed?: true;
  /** No key of the API process opened the sealed payload: `payload` is null. */
  sealedUnreadable?: true;
}

export interface TimerScheduleResult {
  timerId: string;
  deliverAt: string;
  created: boolean;
}

/** `if (r.found)` narrows: `r.timer` is there when found, absent otherwise. */
export type TimerPeekResult<T = unknown> = { found: true; timer: Timer<T> } | { found: false; timer?: undefined };

export interface TimerPage<T = unknown> {
  timers: Timer<T>[];
  /** The cursor of the next page, or null on the last one. */
  next: string | null;
}

export interface TimerCancelResult {
  timerId: string;
  /** true: it will never fire. false with reason `absent`: it already fired, or never existed. */
  cancelled: boolean;
  reason?: 'absent';
}

export interface TimerRescheduleResult {
  timerId: string;
  rescheduled: boolean;
  deliverAt?: string;
  reason?: 'absent';
}

/** A timer operation inside a transaction. */
export type TimerOp =
  | ({ op: 'schedule' } & TimerSchedule)
  | { op: 'cancel'; timerId: string }
  | ({ op: 'reschedule'; timerId: string } & TimerWhen);

// ----------------------------------------------------------------------------------- transactions

/** One element of a committed bundle's flat `results`: operations, then kv, then timers. */
export type TransactionResultEntry =
  | ({ type: 'ack'; index: number } & Omit<AckResult, 'success'> & { success: true })
  | { type: 'push'; index: number; items: PushResult[] }
  | KvResult
  | TimerOpResult;

/** A timer operation's answer inside a bundle: a schedule's `created`, a cancel's `cancelled`, a reschedule's `rescheduled`. */
export interface TimerOpResult {
  index: number;
  op: 'schedule' | 'cancel' | 'reschedule';
  timerId: string;
  created?: boolean;
  cancelled?: boolean;
  rescheduled?: boolean;
  deliverAt?: string;
  reason?: 'absent';
}

export interface AckFailedVerdict {
  success: false;
  reason: 'ack_failed';
  /** In the flat results array. */
  failedIndex: number;
  ackReason: AckReason;
}

/**
 * What `commit()` resolves to. A lost race (`kv_precondition`) and an ack that could not apply
 * (`ack_failed`) are values: nothing in the bundle committed, and the call itself succeeded.
 */
export type TransactionResult =
  | { success: true; results: TransactionResultEntry[] }
  | KvPreconditionVerdict
  | AckFailedVerdict;
