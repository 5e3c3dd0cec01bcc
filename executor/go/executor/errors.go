package executor

import (
	"errors"
	"fmt"

	pb "rara.local/api/gen/go/rara/v1"
)

// JobError is a failure with an explicit wire error code. Operations return it to choose the
// code and whether a retry can help; any other error becomes a retryable HANDLER_ERROR.
//
//	JobError{Retryable: true}    the worker runs the step again (with backoff)
//	JobError{Retryable: false}   the step fails for good
//	Refuse(...)                  the job cannot run here at all: never retryable, before any work
type JobError struct {
	Code      pb.ErrorCode
	Message   string
	Retryable bool
	Details   map[string]string
}

func (e *JobError) Error() string { return e.Message }

// Failed is a HANDLER_ERROR with the given retryability.
func Failed(message string, retryable bool) *JobError {
	return &JobError{Code: pb.ErrorCode_ERROR_CODE_HANDLER_ERROR, Message: message,
		Retryable: retryable}
}

// Refuse is a non-retryable error for a job that cannot run here.
func Refuse(code pb.ErrorCode, message string) *JobError {
	return &JobError{Code: code, Message: message}
}

func (e *JobError) toProto() *pb.Error {
	return &pb.Error{Code: e.Code, Message: e.Message, Retryable: e.Retryable, Details: e.Details}
}

// errorFrom is the structured error for what an operation returned, credential-looking text
// masked: error messages quote what failed (a connection URL, a header), and this one leaves
// the process to be stored and shown.
func errorFrom(err error) *pb.Error {
	var out *pb.Error
	var je *JobError
	if errors.As(err, &je) {
		out = je.toProto()
	} else {
		msg := err.Error()
		if msg == "" {
			msg = fmt.Sprintf("%T", err)
		}
		out = &pb.Error{Code: pb.ErrorCode_ERROR_CODE_HANDLER_ERROR, Message: msg,
			Retryable: true, Details: map[string]string{"error": fmt.Sprintf("%T", err)}}
	}
	out.Message = Redact(out.Message)
	masked := make(map[string]string, len(out.Details))
	for k, v := range out.Details {
		if sensitiveKey.MatchString(k) {
			v = Mask
		}
		masked[k] = Redact(v)
	}
	out.Details = masked
	return out
}

func failedEvent(code pb.ErrorCode, message string, retryable bool) *pb.ExecuteResponse {
	return &pb.ExecuteResponse{Event: &pb.ExecuteResponse_Failed{Failed: &pb.JobFailed{
		Error: &pb.Error{Code: code, Message: message, Retryable: retryable}}}}
}
