// @queen-kv/client: `new Queen({ url })`. The pg mode is its own entry, '@queen-kv/client/pg'.
export { Queen } from './queen';
export type { QueenOptions } from './queen';
export { QueueBuilder } from './queue';
export type { ConsumeOptions, ConsumeSummary } from './queue';
export { TransactionBuilder } from './transaction';
export type { TransactionQueue } from './transaction';
export { Kv, kvOp } from './kv';
export type { KvOp, PutOptions, WriteOptions, IncrOptions, OnceOptions, PrefixOptions } from './kv';
export { Timers } from './timers';
export { Operator } from './operator';
export type { OperatorOptions, OperatorAnswer, PageOptions } from './operator';
export type { ListOptions } from './timers';
export { QueenError, QueenPrecisionError } from './errors';
export type { RetryInfo, RetryOptions, HttpOptions } from './http';
export type { TracingOption } from './tracing';
export { parseJson, stringifyJson } from './json';
export type * from './types';
