// @kiln/sdk: a client for Kiln's HTTP API (docs/api.md) for Node >= 18,
// with no dependencies, and the check of its webhooks' signatures. See README.md.
export { KilnClient, Session } from './src/client.js';
export { Execution } from './src/execution.js';
export { SseParser } from './src/sse.js';
export { verifyWebhook, signWebhook, WebhookVerificationError } from './src/webhooks.js';
export {
  KilnError, InvalidRequestError, LimitExceededError, SecurityBlockedError, UnauthorizedError,
  ForbiddenError, CodeExecutionDisabledError, NotFoundError, SessionNotFoundError,
  ToolCallClosedError, RateLimitedError, QueueFullError, UnavailableError, RuntimeUnavailableError,
} from './src/errors.js';
