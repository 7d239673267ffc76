package sim

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/sluicegw/sluice/internal/jsonx"
)

// Sentinel errors of a generation, grouped by class; every error the engine answers with wraps one.
var (
	// Request errors: the engine refuses the request before it runs.
	errBadRequest    = errors.New("invalid request")
	errModelNotFound = errors.New("model not found")
	// Abort errors: the engine aborted an accepted request (SGLang prepare_abort, vLLM engine errors).
	errMissingRoom       = errors.New("missing bootstrap room")
	errBootstrapTimeout  = errors.New("bootstrap timeout")
	errBootstrapMismatch = errors.New("bootstrap mismatch")
	errKVTransfer        = errors.New("kv transfer failed")
	// Crash errors: an unhandled exception inside the engine.
	errEngineCrash = errors.New("engine exception")
	// Faults.
	errInjected = errors.New("injected fault")
	errDie      = errors.New("injected connection death")
)

// engineError is what an engine reports about a failed request: the status, its message and, for
// vLLM, the parameter it blames. How it is written depends on the engine and route (writeEngineError).
type engineError struct {
	kind   error  // one of the sentinels above
	status int    // HTTP status
	msg    string // the engine's message, verbatim in its style
	param  string // vLLM ErrorInfo.param (VLLMValidationError.parameter); "" is null
	// schema marks a request-schema error (FastAPI's RequestValidationError, both engines): SGLang
	// answers those with its legacy ErrorResponse even on /generate.
	schema bool
	// httpException marks an SGLang HTTPException raised while converting an OpenAI request
	// (serving_base.py handle_request: the type is str(status_code)).
	httpException bool
}

func (e *engineError) Error() string { return e.msg }
func (e *engineError) Unwrap() error { return e.kind }

// requestError is a validation error raised by the engine's tokenizer/serving layer (SGLang
// ValueError, vLLM VLLMValidationError): 400 before the request runs.
func requestError(param, format string, args ...any) error {
	return &engineError{kind: errBadRequest, status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...), param: param}
}

// schemaError is a body that does not fit the request schema (malformed JSON, wrong field types).
func schemaError(format string, args ...any) error {
	return &engineError{kind: errBadRequest, status: http.StatusBadRequest, msg: fmt.Sprintf(format, args...), schema: true}
}

// abortError is a request the engine accepted and then aborted with status.
func abortError(kind error, status int, format string, args ...any) error {
	return &engineError{kind: kind, status: status, msg: fmt.Sprintf(format, args...)}
}

// asEngineError returns err's engineError, wrapping a plain error as an internal server error.
func asEngineError(err error) *engineError {
	var ee *engineError
	if errors.As(err, &ee) {
		return ee
	}
	return &engineError{kind: err, status: http.StatusInternalServerError, msg: err.Error()}
}

// errorStatus is the HTTP status an error is answered with.
func errorStatus(err error) int { return asEngineError(err).status }

// vllmErrorType is the ErrorInfo.type vLLM gives a status
// (vllm/entrypoints/serve/exception_handling/error_response.py create_error_response).
func vllmErrorType(status int) string {
	switch {
	case status == http.StatusBadRequest:
		return "BadRequestError"
	case status == http.StatusNotFound:
		return "NotFoundError"
	case status == http.StatusUnprocessableEntity:
		return "UnprocessableEntityError"
	case status == http.StatusNotImplemented:
		return "NotImplementedError"
	case status >= 500:
		return "InternalServerError"
	default:
		return http.StatusText(status) // GracefulHTTPError: the status phrase
	}
}

// pythonStatusName is Python's HTTPStatus(code).name ("INTERNAL_SERVER_ERROR"), which SGLang's OpenAI
// streaming puts in an abort frame's type (serving_completions.py _generate_completion_stream).
func pythonStatusName(status int) string {
	b := []byte(http.StatusText(status))
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z':
			b[i] = c - 'a' + 'A'
		case c == ' ' || c == '-':
			b[i] = '_'
		}
	}
	return string(b)
}

// appendVLLMError appends vLLM's ErrorResponse: {"error":{"message","type","param","code"}} with the HTTP
// status as code (vllm/entrypoints/serve/engine/protocol.py ErrorInfo, ErrorResponse).
func appendVLLMError(dst []byte, ee *engineError) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = jsonx.AppendString(dst, ee.msg)
	dst = append(dst, `,"type":`...)
	dst = jsonx.AppendString(dst, vllmErrorType(ee.status))
	dst = append(dst, `,"param":`...)
	if ee.param == "" {
		dst = append(dst, "null"...)
	} else {
		dst = jsonx.AppendString(dst, ee.param)
	}
	dst = append(dst, `,"code":`...)
	dst = strconv.AppendInt(dst, int64(ee.status), 10)
	return append(dst, "}}"...)
}

// appendSGLangErrorResponse appends SGLang's legacy ErrorResponse {"object":"error","message","type",
// "param":null,"code"} (python/sglang/srt/entrypoints/openai/protocol.py ErrorResponse).
func appendSGLangErrorResponse(dst []byte, msg, typ string, status int) []byte {
	dst = append(dst, `{"object":"error","message":`...)
	dst = jsonx.AppendString(dst, msg)
	dst = append(dst, `,"type":`...)
	dst = jsonx.AppendString(dst, typ)
	dst = append(dst, `,"param":null,"code":`...)
	dst = strconv.AppendInt(dst, int64(status), 10)
	return append(dst, '}')
}

// appendSGLangPlainError appends the {"error":{"message":...}} that SGLang's native /generate answers
// a ValueError with (http_server.py generate_request, _create_error_response).
func appendSGLangPlainError(dst []byte, msg string) []byte {
	dst = append(dst, `{"error":{"message":`...)
	dst = jsonx.AppendString(dst, msg)
	return append(dst, "}}"...)
}

// sglangErrorType is the ErrorResponse.type SGLang writes for an error answered before streaming:
// "Bad Request" from its RequestValidationError handler, "InternalServerError" from serving_base's
// catch-all, "BadRequestError" for a ValueError (create_error_response's default), and str(status)
// for an HTTPException (an abort with status 500/503, tokenizer_manager _handle_abort_finish_reason).
func sglangErrorType(ee *engineError) string {
	switch {
	case ee.schema:
		return "Bad Request"
	case ee.httpException:
		return strconv.Itoa(ee.status)
	case errors.Is(ee, errEngineCrash):
		return "InternalServerError"
	case ee.status == http.StatusBadRequest:
		return "BadRequestError"
	default:
		return strconv.Itoa(ee.status)
	}
}

// appendErrorBody appends the body an engine answers a failed non-streaming request with, and returns
// whether it is JSON (SGLang's /generate answers an unhandled exception with Starlette's plain text).
func (e *Engine) appendErrorBody(dst []byte, api apiKind, err error) ([]byte, bool) {
	ee := asEngineError(err)
	if e.cfg.Protocol == ProtocolVLLM {
		return appendVLLMError(dst, ee), true
	}
	if api != apiGenerate {
		return appendSGLangErrorResponse(dst, ee.msg, sglangErrorType(ee), ee.status), true
	}
	switch {
	case errors.Is(ee, errEngineCrash):
		return append(dst, "Internal Server Error"...), false
	case ee.schema || ee.status != http.StatusBadRequest:
		// RequestValidationError, or an HTTPException from an abort: the app's exception handlers.
		return appendSGLangErrorResponse(dst, ee.msg, sglangErrorType(ee), ee.status), true
	default:
		return appendSGLangPlainError(dst, ee.msg), true
	}
}

// writeEngineError answers a failed non-streaming request as the engine would.
func (e *Engine) writeEngineError(w http.ResponseWriter, api apiKind, err error) {
	bp := getBuf()
	defer putBuf(bp)
	b, isJSON := e.appendErrorBody((*bp)[:0], api, err)
	*bp = b
	if isJSON {
		w.Header()["Content-Type"] = jsonContentType
	} else {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	}
	w.WriteHeader(errorStatus(err))
	_, _ = w.Write(b)
}

// appendStreamError appends the data payload of an in-stream error frame. SGLang's /generate writes an
// abort as a regular result whose finish_reason is the abort; ok is false when the engine writes no
// frame at all (an unhandled exception breaks the connection instead).
func (e *Engine) appendStreamError(dst []byte, job *genJob, err error) (_ []byte, ok bool) {
	ee := asEngineError(err)
	switch {
	case e.cfg.Protocol == ProtocolVLLM:
		// serving_engine create_streaming_error_response: the ErrorResponse, JSON-encoded.
		return appendVLLMError(dst, ee), true
	case errors.Is(ee, errEngineCrash):
		return dst, false
	case job.api != apiGenerate:
		dst = append(dst, `{"error":`...)
		dst = appendSGLangErrorResponse(dst, ee.msg, pythonStatusName(ee.status), ee.status)
		return append(dst, '}'), true
	case errors.Is(ee, errBadRequest):
		return appendSGLangPlainError(dst, ee.msg), true // http_server stream_results: except ValueError
	default:
		return appendGenerateAbort(dst, job, ee), true
	}
}

// appendGenerateAbort appends the /generate result of an aborted request: meta_info.finish_reason is
// {"type":"abort","message","status_code","err_type"} (schedule_batch FINISH_ABORT.to_json).
func appendGenerateAbort(dst []byte, job *genJob, ee *engineError) []byte {
	dst = append(dst, `{"text":"","output_ids":[],"meta_info":{"id":`...)
	dst = jsonx.AppendString(dst, job.id)
	dst = append(dst, `,"finish_reason":{"type":"abort","message":`...)
	dst = jsonx.AppendString(dst, ee.msg)
	dst = append(dst, `,"status_code":`...)
	dst = strconv.AppendInt(dst, int64(ee.status), 10)
	return append(dst, `,"err_type":null},"prompt_tokens":0,"completion_tokens":0,"cached_tokens":0}}`...)
}

// appendSimError appends the error body of the simulator's own control endpoints (/sim/*).
func appendSimError(dst []byte, status int, msg string) []byte {
	return appendVLLMError(dst, &engineError{status: status, msg: msg})
}

// writeSimError answers a simulator control request (not an engine API) with an error.
func writeSimError(w http.ResponseWriter, status int, msg string) {
	b := getBuf()
	defer putBuf(b)
	*b = appendSimError((*b)[:0], status, msg)
	w.Header()["Content-Type"] = jsonContentType
	w.WriteHeader(status)
	_, _ = w.Write(*b)
}
