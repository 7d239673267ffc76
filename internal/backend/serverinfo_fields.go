package backend

// ParseServerInfo picks the fields a gateway completes a worker's spec with out of SGLang's server
// info, however it came: HTTP's /get_server_info, or the engine gRPC's GetServerInfo merged into the
// same shape (enginegrpc.GetServerInfo), so both transports read it alike. Nil gives nil.
func ParseServerInfo(info map[string]any) *ServerInfoFields {
	if info == nil {
		return nil
	}
	return serverInfoFields(info)
}
