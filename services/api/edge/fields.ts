// Field rules that more than one route applies, so one mistake gets one answer whichever route it
// comes through (a KV operation alone or inside the transaction wire, say).
import { ApiError } from '../../../shared/errors';
import { isPlainObject } from './body';

/**
 * PostgreSQL's text cannot hold U+0000: a path segment or query value carrying %00 failed the
 * parameter's bind ("invalid byte sequence for encoding UTF8: 0x00", 22021) and was answered 400
 * invalid_json, on a GET with no body. Such a value breaks the field's own rule, so it gets the
 * field's own code, before it reaches SQL.
 */
export function refuseNul(value: string | null | undefined, code: string, message: string): void {
  if (value != null && value.includes('\u0000')) throw new ApiError(code, message);
}

/** The name rule of namespaces, queues, partitions and groups, worded as queen.name_ok_v1's refusals word it. */
export const nameRule = (what: string) => `${what} is 1 to 128 characters of A-Z a-z 0-9 _ . : - and does not start with . : or -.`;

const NAMESPACE_RULE = nameRule('A namespace');

/**
 * A NUL in a batch key or namespace is refused with the KV's own code; a NUL elsewhere fails the
 * jsonb cast: invalid_json. Used by POST /api/v1/kv and by the transaction wire's `kv` array, so
 * one operation gets one answer whichever way it comes.
 */
export function refuseNulKeys(text: string, ops: unknown): void {
  if (!text.includes('\\u0000') || !Array.isArray(ops)) return;
  ops.forEach((op, index) => {
    if (!isPlainObject(op)) return;
    if (typeof op.ns === 'string' && op.ns.includes('\u0000')) {
      throw new ApiError('kv_invalid_namespace', `Operation ${index}: ${NAMESPACE_RULE}`, { index });
    }
    const keys = [op.key, op.prefix, ...(Array.isArray(op.keys) ? op.keys : [])];
    if (keys.some((k) => typeof k === 'string' && k.includes('\u0000'))) {
      throw new ApiError('kv_invalid_key', `Operation ${index}: a key may not contain U+0000.`, { index });
    }
  });
}

/**
 * The fields a push item takes, on POST /api/v1/push and in a transaction-wire push operation: what
 * Queen's JavaScript client sends (queue, partition, payload, transactionId, and traceId when one is
 * given). A field added to push is one more name here.
 */
export const PUSH_ITEM_FIELDS: readonly string[] = ['queue', 'partition', 'payload', 'transactionId', 'traceId'];
const PUSH_ITEM_SET = new Set(PUSH_ITEM_FIELDS);

/**
 * A push item's field rules, before any SQL (the items are parsed for routing anyway): a field push
 * does not take is 400 log_invalid_field naming it, an item without `payload` is 400
 * log_payload_required, a traceId that is not UUID text (nor "" or null, none) is 400
 * log_invalid_trace_id. Queen's server drops an unknown field and
 * stores `{}` for a missing payload; a producer's `data` (Queen's client's own word for the payload)
 * or a misspelled `partiton` then became a message with no payload, or in the wrong partition,
 * answered 201. `operation` is the transaction wire's operation index, which the 400 names there
 * (the item's own index names it on the push route). A non-object item is left to SQL
 * (log_invalid_item). Answers whether an item carries a traceId (the push then stores it:
 * docs/tracing.md), so a push without one keeps its statements.
 */
export function refusePushItems(items: unknown[], operation?: number): boolean {
  let traced = false;
  for (let i = 0; i < items.length; i++) {
    const item = items[i];
    if (!isPlainObject(item)) continue;
    const where = operation === undefined ? `Item ${i}` : `Operation ${operation}, item ${i}`;
    const index = operation ?? i;
    const stray = Object.keys(item).filter((f) => !PUSH_ITEM_SET.has(f));
    if (stray.length > 0) {
      const named = nameFields(stray);
      const hint = stray.includes('data') && !('payload' in item) ? ' (the message goes in payload)' : '';
      throw new ApiError('log_invalid_field', `${where} has a field push does not take: ${named}${hint}. Its fields are ${PUSH_ITEM_FIELDS.join(', ')}.`, { index });
    }
    if (!('payload' in item)) {
      throw new ApiError('log_payload_required', `${where}: payload is required (any JSON value, null included).`, { index });
    }
    // Queen's traceId: stored on the message (queen.log_trace_id_v1 holds the same rule).
    if (item.traceId !== undefined && item.traceId !== null && item.traceId !== '') {
      if (typeof item.traceId !== 'string' || !TRACE_ID.test(item.traceId)) {
        throw new ApiError('log_invalid_trace_id', `${where}: traceId is UUID text (such as 4bf92f35-77b3-4da6-a3ce-929d0e0e4736), or "" for none.`, { index });
      }
      traced = true;
    }
  }
  return traced;
}

/**
 * The fields of a push body: `items`, all Queen's JavaScript client sends (its push, its buffer's
 * flush and its producer all post `{items}`). Anything else was ignored, so a misspelled key
 * beside `items` (an `itemz`, a `queue` meant as every item's default) was answered 201 as if it
 * were not there. Queen's API.md documents `bufferMs` / `bufferMax` (server-side buffering, with
 * a buffer status in the answer); its server reads neither, and the cell does not buffer: 400
 * unsupported, naming them. Checked before `items`, so a body of only a misspelled `itemz` names
 * it rather than answering log_items_required.
 */
export const PUSH_BODY_FIELDS: readonly string[] = ['items'];
const QUEEN_BUFFER_FIELDS = new Set(['bufferMs', 'bufferMax']);

/** A push operation of the transaction wire takes `type` and `items`, as Queen's TransactionBuilder sends it. */
export const PUSH_OPERATION_FIELDS: readonly string[] = ['type', 'items'];

const nameFields = (fields: string[]) => fields.slice(0, 5).map((f) => (f.length > 64 ? `${f.slice(0, 64)}...` : f)).join(', ');

/** POST /api/v1/push's body: 400 log_invalid_field naming a field other than `items` (unsupported for Queen's buffering). */
export function refusePushBody(body: Record<string, unknown>): void {
  const stray = Object.keys(body).filter((f) => !PUSH_BODY_FIELDS.includes(f));
  if (stray.length === 0) return;
  const buffering = stray.filter((f) => QUEEN_BUFFER_FIELDS.has(f));
  if (buffering.length === stray.length) {
    throw new ApiError('unsupported', `${buffering.join(' and ')}: server-side buffering is not implemented; a push is stored when it is answered (buffer in the client).`);
  }
  throw new ApiError('log_invalid_field', `The push has a field it does not take: ${nameFields(stray)}. Its only field is items (each item takes ${PUSH_ITEM_FIELDS.join(', ')}).`);
}

/**
 * A transaction-wire push operation's own fields: `type` and `items`. A `queue` or `partition`
 * beside `items` (meant for every item) was ignored, the items going to their own queue or Default.
 */
export function refusePushOperation(op: Record<string, unknown>, operation: number): void {
  const stray = Object.keys(op).filter((f) => !PUSH_OPERATION_FIELDS.includes(f));
  if (stray.length === 0) return;
  throw new ApiError('log_invalid_field', `Operation ${operation} (push) has a field it does not take: ${nameFields(stray)}. Its fields are type and items (each item takes ${PUSH_ITEM_FIELDS.join(', ')}).`, { index: operation });
}

/** Queen's traceId: UUID text, either case (a W3C trace id's 32 hex digits, with the UUID's dashes). */
const TRACE_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
